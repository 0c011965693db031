// Chat requests: "messages", "tools" and "tool_choice" rendered into the
// model's prompt by its chat format (model/chat_template.h). A template that
// lays out tools itself in the <tool_call> convention tandem parses gets the
// tools and the calls structured; for every other format the tools become a
// system message that lists each function and asks for calls as
// <tool_call>{"name": ..., "arguments": {...}}</tool_call>, and earlier calls
// and their results are rendered back in that same form, so the model sees
// one consistent convention across the conversation.
#include <algorithm>
#include <string>
#include <vector>

#include "server/openai_api.h"
#include "model/literal_text.h"
#include "server/openai_json.h"

namespace tandem::openai_internal {
namespace {

struct ToolSpec {
  std::string name;
  std::string description;
  Json parameters;  // a JSON Schema object, or null
  nlohmann::ordered_json ordered_parameters;  // the same with the client's key order (null if absent)
};

// tool_choice: "auto", "none", "required", or a named function.
struct ToolChoice {
  std::string mode = "auto";
  std::string forced_name;  // set when a named function is required
  bool parallel = true;     // parallel_tool_calls
};

std::string Indexed(std::string_view base, size_t i) {
  return std::string(base) + "[" + std::to_string(i) + "]";
}

// {"name": ..., "arguments": ...} with name first, as the prompt shows it
// (nlohmann would sort the keys).
std::string ToolCallText(const std::string& name, const Json& arguments) {
  return "<tool_call>{\"name\": " + Quote(name) + ", \"arguments\": " + Dump(arguments) +
         "}</tool_call>";
}

MaybeError ReadTool(const Json& tool, const std::string& name, ToolSpec* out) {
  if (!tool.is_object() || tool.value("type", Json()) != "function") {
    return BadRequest(name, "'" + name + "' must be an object with \"type\": \"function\"");
  }
  const Json* function = Field(tool, "function");
  if (function == nullptr || !function->is_object()) {
    return BadRequest(name, "'" + name + ".function' must be an object");
  }
  const Json* fn_name = Field(*function, "name");
  if (fn_name == nullptr || !fn_name->is_string() ||
      fn_name->get_ref<const std::string&>().empty()) {
    return BadRequest(name, "'" + name + ".function.name' must be a non-empty string");
  }
  TANDEM_RETURN_IF_API_ERROR(ReadString(*fn_name, name + ".function.name", &out->name));
  if (const Json* d = Field(*function, "description")) {
    TANDEM_RETURN_IF_API_ERROR(ReadString(*d, name + ".function.description", &out->description));
  }
  if (const Json* p = Field(*function, "parameters")) {
    if (!p->is_object()) {
      return BadRequest(name, "'" + name + ".function.parameters' must be a JSON Schema object");
    }
    out->parameters = *p;
  }
  return std::nullopt;
}

MaybeError ReadTools(const Json& body, const nlohmann::ordered_json& ordered, std::vector<ToolSpec>* tools) {
  const Json* v = Field(body, "tools");
  if (v == nullptr) return std::nullopt;
  if (!v->is_array()) return BadRequest("tools", "'tools' must be an array");
  for (size_t i = 0; i < v->size(); ++i) {
    tools->emplace_back();
    TANDEM_RETURN_IF_API_ERROR(ReadTool((*v)[i], Indexed("tools", i), &tools->back()));
    if (tools->back().parameters.is_null()) continue;
    // The parameters as sent, key order kept: templates print them and forced
    // calls write their arguments in that order.
    tools->back().ordered_parameters = nlohmann::ordered_json::parse(tools->back().parameters.dump());
    if (ordered.is_object() && ordered.contains("tools") && ordered["tools"].is_array() && i < ordered["tools"].size()) {
      const auto& fn = ordered["tools"][i];
      if (fn.is_object() && fn.contains("function") && fn["function"].is_object() &&
          fn["function"].contains("parameters") && fn["function"]["parameters"].is_object()) {
        tools->back().ordered_parameters = fn["function"]["parameters"];
      }
    }
  }
  return std::nullopt;
}

MaybeError ReadToolChoice(const Json& body, const std::vector<ToolSpec>& tools, ToolChoice* out) {
  TANDEM_RETURN_IF_API_ERROR(ReadOptionalBool(body, "parallel_tool_calls", &out->parallel));
  const Json* v = Field(body, "tool_choice");
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) {
    out->mode = v->get<std::string>();
    if (out->mode != "auto" && out->mode != "none" && out->mode != "required") {
      return BadRequest("tool_choice",
                        "'tool_choice' must be \"auto\", \"none\", \"required\" "
                        "or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
  } else {
    const Json* function = v->is_object() ? Field(*v, "function") : nullptr;
    const Json* name =
        function != nullptr && function->is_object() ? Field(*function, "name") : nullptr;
    if (name == nullptr || !name->is_string() || v->value("type", Json()) != "function") {
      return BadRequest("tool_choice",
                        "'tool_choice' object must be {\"type\": \"function\", "
                        "\"function\": {\"name\": ...}}");
    }
    out->mode = "function";
    out->forced_name = name->get<std::string>();
    const bool known = std::any_of(tools.begin(), tools.end(),
                                   [&](const ToolSpec& t) { return t.name == out->forced_name; });
    if (!known && !tools.empty()) {
      return BadRequest("tool_choice", "'tool_choice' names function '" + out->forced_name +
                                           "', which is not in 'tools'");
    }
  }
  if (tools.empty() && out->mode != "none" && out->mode != "auto") {
    return BadRequest("tool_choice", "'tool_choice' requires 'tools'");
  }
  return std::nullopt;
}

// What tool_choice asks of the model, as a sentence; for "auto" only when
// optional_text (templates that lay out tools say it themselves).
std::string ToolChoiceText(const ToolChoice& choice, bool optional_text) {
  const std::string one = choice.parallel ? "" : "Call at most one function.";
  auto with_one = [&](std::string s) { return one.empty() ? s : s.empty() ? one : s + " " + one; };
  if (choice.mode == "required") return with_one("You must call at least one function.");
  if (choice.mode == "function") return with_one("You must call the function '" + choice.forced_name + "'.");
  return with_one(optional_text ? "Call a function only when it helps; otherwise answer directly." : "");
}

std::string ToolsSystemText(const std::vector<ToolSpec>& tools, const ToolChoice& choice) {
  std::string out =
      "# Tools\n\nYou may call functions to help answer. The available functions, one JSON "
      "object per line:\n";
  for (const ToolSpec& t : tools) {
    out += "{\"name\": " + Quote(t.name) + ", \"description\": " + Quote(t.description) +
           ", \"parameters\": " + Dump(t.parameters.is_null() ? Json::object() : t.parameters) +
           "}\n";
  }
  out +=
      "\nTo call a function, answer with one block per call, in exactly this form:\n"
      "<tool_call>{\"name\": \"<function name>\", \"arguments\": <arguments as a JSON "
      "object>}</tool_call>\n";
  return out + ToolChoiceText(choice, /*optional_text=*/true);
}

// A string, or an array of {"type": "text", "text": ...} parts (joined by
// newlines, as other servers do).
MaybeError ReadContent(const Json& content, const std::string& name, std::string* out) {
  if (content.is_string()) return ReadString(content, name, out);
  if (!content.is_array()) {
    return BadRequest(name, "'" + name + "' must be a string or an array of text parts");
  }
  std::string joined;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string part_name = Indexed(name, i);
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return BadRequest(part_name, "'" + part_name + "' must be an object with a \"type\"");
    }
    const std::string type = part["type"].get<std::string>();
    if (type != "text") {
      return BadRequest(part_name, "'" + part_name + "' has type '" + type +
                                       "'; only \"text\" parts are supported");
    }
    const Json* text = Field(part, "text");
    if (text == nullptr) {
      return BadRequest(part_name + ".text", "'" + part_name + ".text' is required");
    }
    std::string piece;
    TANDEM_RETURN_IF_API_ERROR(ReadString(*text, part_name + ".text", &piece));
    if (i > 0) joined += "\n";
    joined += piece;
  }
  *out = std::move(joined);
  return std::nullopt;
}

// An assistant turn's earlier tool calls, validated, with their arguments
// parsed: [{"id", "type": "function", "function": {"name", "arguments"}}].
MaybeError ReadToolCalls(const Json& calls, const std::string& name, jinja::Json* out) {
  if (!calls.is_array()) return BadRequest(name, "'" + name + "' must be an array");
  *out = jinja::Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string call_name = Indexed(name, i);
    const Json* function = calls[i].is_object() ? Field(calls[i], "function") : nullptr;
    const Json* fn_name =
        function != nullptr && function->is_object() ? Field(*function, "name") : nullptr;
    if (fn_name == nullptr || !fn_name->is_string()) {
      return BadRequest(call_name, "'" + call_name + ".function.name' must be a string");
    }
    jinja::Json arguments = jinja::Json::object();
    if (const Json* a = Field(*function, "arguments")) {
      if (!a->is_string()) {
        return BadRequest(call_name,
                          "'" + call_name + ".function.arguments' must be a JSON string");
      }
      const std::string& text = a->get_ref<const std::string&>();
      if (JsonNestingDepth(text, kMaxJsonDepth) > kMaxJsonDepth) {
        return BadRequest(call_name, "'" + call_name + ".function.arguments' is nested too deeply");
      }
      arguments = jinja::Json::parse(text, nullptr, false);
      if (arguments.is_discarded()) {
        return BadRequest(call_name, "'" + call_name + ".function.arguments' is not valid JSON");
      }
    }
    jinja::Json call = jinja::Json::object();
    if (const Json* id = Field(calls[i], "id"); id != nullptr && id->is_string()) call["id"] = id->get<std::string>();
    call["type"] = "function";
    call["function"] = {{"name", fn_name->get<std::string>()}, {"arguments", std::move(arguments)}};
    out->push_back(std::move(call));
  }
  return std::nullopt;
}

MaybeError ReadMessage(const Json& m, const std::string& name, ChatMessage* out) {
  if (!m.is_object()) return BadRequest(name, "'" + name + "' must be an object");
  const Json* role = Field(m, "role");
  if (role == nullptr) return BadRequest(name, "'" + name + "' must have a 'role'");
  TANDEM_RETURN_IF_API_ERROR(ReadString(*role, name + ".role", &out->role));
  if (out->role == "developer") out->role = "system";  // OpenAI's newer name for it
  if (out->role != "system" && out->role != "user" && out->role != "assistant" &&
      out->role != "tool") {
    return BadRequest(name + ".role", "'" + name + "' has role '" + out->role +
                                          "'; expected system, developer, user, assistant or tool");
  }
  const Json* calls = out->role == "assistant" ? Field(m, "tool_calls") : nullptr;
  const Json* content = Field(m, "content");
  if (content == nullptr && calls == nullptr) {  // (Field treats null as absent)
    return BadRequest(name, "'" + name + "' must have 'content'");
  }
  if (content != nullptr) {
    TANDEM_RETURN_IF_API_ERROR(ReadContent(*content, name + ".content", &out->content));
  }
  if (calls != nullptr) {
    TANDEM_RETURN_IF_API_ERROR(ReadToolCalls(*calls, name + ".tool_calls", &out->tool_calls));
  }
  if (out->role == "tool") {
    if (const Json* id = Field(m, "tool_call_id")) {
      TANDEM_RETURN_IF_API_ERROR(ReadString(*id, name + ".tool_call_id", &out->tool_call_id));
    }
  }
  return std::nullopt;
}

// For formats that do not lay out tool calls themselves: earlier calls are
// appended to their turn's content in the <tool_call> form the model is asked
// to produce, and results are wrapped in <tool_response>.
void FlattenToolCalls(std::vector<ChatMessage>* messages) {
  for (ChatMessage& m : *messages) {
    if (m.tool_calls.is_array()) {
      for (const jinja::Json& call : m.tool_calls) {
        if (!m.content.empty()) m.content += "\n";
        m.content += ToolCallText(call["function"]["name"].get<std::string>(),
                                  Json(call["function"]["arguments"]));
      }
    }
    m.tool_calls = nullptr;
    if (m.role == "tool") m.content = "<tool_response>\n" + m.content + "\n</tool_response>";
    m.tool_call_id.clear();
  }
}

MaybeError ReadMessages(const Json& body, std::vector<ChatMessage>* out) {
  const Json* v = Field(body, "messages");
  if (v == nullptr) return BadRequest("messages", "'messages' is required");
  if (!v->is_array()) return BadRequest("messages", "'messages' must be an array");
  if (v->empty()) return BadRequest("messages", "'messages' must not be empty");
  out->resize(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    TANDEM_RETURN_IF_API_ERROR(ReadMessage((*v)[i], Indexed("messages", i), &(*out)[i]));
  }
  return std::nullopt;
}

}  // namespace

// tool_choice "required" or a named function: calls of allowed tools in the
// format the answer is parsed in, with arguments their parameters schema
// accepts. A named function is called once; "required" allows up to 8 calls
// when parallel_tool_calls is on (one in Llama 3's bare-JSON format).
std::string ForcedToolCallConstraint(const std::vector<ToolSpec>& tools, const ToolChoice& choice,
                                     ToolCallFormat format) {
  using OJson = nlohmann::ordered_json;
  OJson list = OJson::array();
  for (const ToolSpec& t : tools) {
    if (choice.mode == "function" && t.name != choice.forced_name) continue;
    list.push_back({{"name", t.name}, {"parameters", t.parameters.is_null() ? OJson{{"type", "object"}} : t.ordered_parameters}});
  }
  const bool many = choice.mode == "required" && choice.parallel && format != ToolCallFormat::kJson;
  OJson spec = {{"tools", std::move(list)},
                {"key", format == ToolCallFormat::kJson ? "parameters" : "arguments"},
                {"max_calls", many ? 8 : 1}};
  if (format == ToolCallFormat::kTagged) {
    spec["call_prefix"] = "<tool_call>", spec["call_suffix"] = "</tool_call>", spec["separator"] = "\n";
  } else if (format == ToolCallFormat::kMistral) {
    spec["open"] = "[TOOL_CALLS][", spec["close"] = "]", spec["separator"] = ",";
  }
  return "tool_calls " + Dump(spec);
}

// Every string in `j` (keys too) marked as the client's (model/literal_text.h).
template <typename JsonT>
JsonT MarkStrings(const Tokenizer& tok, const JsonT& j) {
  if (j.is_string()) return JsonT(MarkLiteral(tok, j.template get_ref<const std::string&>()));
  if (j.is_array()) {
    JsonT out = JsonT::array();
    for (const auto& e : j) out.push_back(MarkStrings(tok, e));
    return out;
  }
  if (j.is_object()) {
    JsonT out = JsonT::object();
    for (auto it = j.begin(); it != j.end(); ++it) out[MarkLiteral(tok, it.key())] = MarkStrings(tok, it.value());
    return out;
  }
  return j;
}

// What the template renders of the client's: contents, earlier tool calls,
// tool results and tool descriptions, with their special-token spellings
// marked so they tokenize as text (invariant 7). The tools themselves stay
// as sent: their schemas also build the grammar.
void MarkClientText(const Tokenizer& tok, std::vector<ChatMessage>* messages, std::vector<ToolSpec>* tools) {
  for (ChatMessage& m : *messages) {
    m.content = MarkLiteral(tok, m.content);
    m.tool_calls = MarkStrings(tok, m.tool_calls);
    m.tool_call_id = MarkLiteral(tok, m.tool_call_id);
  }
  for (ToolSpec& t : *tools) {
    t.name = MarkLiteral(tok, t.name);
    t.description = MarkLiteral(tok, t.description);
    t.parameters = MarkStrings(tok, t.parameters);
    t.ordered_parameters = MarkStrings(tok, t.ordered_parameters);
  }
}

MaybeError BuildChatPrompt(const Json& body, const nlohmann::ordered_json& ordered, const ModelInfo& model,
                           std::vector<int32_t>* tokens, bool* tools_enabled, ToolCallFormat* tool_format,
                           std::string* forced_constraint) {
  std::vector<ChatMessage> messages;
  TANDEM_RETURN_IF_API_ERROR(ReadMessages(body, &messages));
  std::vector<ToolSpec> tools;
  ToolChoice choice;
  TANDEM_RETURN_IF_API_ERROR(ReadTools(body, ordered, &tools));
  TANDEM_RETURN_IF_API_ERROR(ReadToolChoice(body, tools, &choice));
  const Tokenizer& tok = *model.tokenizer;
  std::vector<ToolSpec> rendered_tools = tools;
  MarkClientText(tok, &messages, &rendered_tools);
  ToolChoice rendered_choice = choice;  // its forced name is the client's too
  rendered_choice.forced_name = MarkLiteral(tok, choice.forced_name);
  *tools_enabled = !tools.empty() && choice.mode != "none";
  TANDEM_CHECK_MSG(model.chat_format != nullptr, "ModelInfo without a chat format");
  const ChatFormat& format = *model.chat_format;
  *tool_format = format.tool_call_format();
  if (choice.mode == "required" || choice.mode == "function") {
    *forced_constraint = ForcedToolCallConstraint(tools, choice, *tool_format);
  }
  jinja::Json template_tools;  // null: none for the template
  std::string system_text;     // what tandem adds to the system turn
  if (format.native_tool_calls()) {
    if (*tools_enabled) {
      template_tools = jinja::Json::array();
      for (const ToolSpec& t : rendered_tools) {
        jinja::Json fn = {{"name", t.name}};
        if (!t.description.empty()) fn["description"] = t.description;
        fn["parameters"] = t.parameters.is_null() ? jinja::Json::object() : t.ordered_parameters;
        template_tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
      }
      system_text = ToolChoiceText(rendered_choice, /*optional_text=*/false);
    }
  } else {
    FlattenToolCalls(&messages);
    if (*tools_enabled) system_text = ToolsSystemText(rendered_tools, rendered_choice);
  }
  if (!system_text.empty()) {
    if (messages.front().role == "system") {
      messages.front().content += "\n\n" + system_text;
    } else {
      messages.insert(messages.begin(), ChatMessage{"system", system_text});
    }
  }
  const std::string bos_text = tok.bos_id() >= 0 ? tok.TokenText(tok.bos_id()) : std::string();
  const std::string eos_text = tok.eos_id() >= 0 ? tok.TokenText(tok.eos_id()) : std::string();
  StatusOr<std::string> prompt =
      format.Render(messages, template_tools, /*add_generation_prompt=*/true, bos_text, eos_text);
  if (!prompt.ok()) {
    if (prompt.status().code() != StatusCode::kInvalidArgument) return ApiErrorFromStatus(prompt.status());
    return BadRequest("messages", "the chat template refused the messages: " + prompt.status().message());
  }
  // Templates that spell BOS themselves get none added; special tokens are
  // parsed so the template's markers become their control tokens, and only
  // those: the client's spellings of them stay text.
  const UnmarkedPrompt unmarked = UnmarkLiteral(tok, *prompt);
  TANDEM_RETURN_IF_API_ERROR(CheckPromptBytes(unmarked.text.size(), model, "messages"));
  *tokens = tok.Encode(unmarked.text, ChatFormat::NeedsBos(unmarked.text, tok.add_bos(), bos_text),
                       /*parse_special=*/true, unmarked.literal);
  if (tokens->empty()) return BadRequest("messages", "the rendered prompt is empty");
  return std::nullopt;
}

}  // namespace tandem::openai_internal
