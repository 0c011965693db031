// Request parsing shared by /v1/chat/completions and /v1/completions: the
// fields both carry (model, sampling, limits, streaming), the completions
// prompt, and the context-length arithmetic.
#include <algorithm>
#include <limits>

#include "server/openai_api.h"
#include "server/openai_json.h"
#include "runtime/stop_strings.h"

namespace tandem {
namespace {

using openai_internal::BadRequest;
using openai_internal::Field;
using openai_internal::Json;
using openai_internal::MaybeError;

constexpr int64_t kDefaultMaxTokens = 256;
constexpr size_t kMaxStopStrings = 64;  // OpenAI takes 4; agent frameworks send more

MaybeError ReadModel(const Json& body, const ModelInfo& model, std::string* out) {
  const Json* v = Field(body, "model");
  if (v == nullptr) {  // some clients omit it when a server serves one model
    *out = model.id;
    return std::nullopt;
  }
  std::string name;
  TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadString(*v, "model", &name));
  if (name != model.id) {
    ApiError e =
        BadRequest("model", "model '" + name + "' not found; this server serves '" + model.id + "'",
                   "model_not_found");
    e.http_status = 404;
    return e;
  }
  *out = std::move(name);
  return std::nullopt;
}

ApiError NotSupported(const char* field, std::string why) {
  return BadRequest(field, std::string("'") + field + "' is not supported" + why);
}

// Fields whose meaning we cannot honour. Ignoring them would hand the client
// an answer to a question it did not ask, so each is refused by name.
MaybeError RejectUnsupported(const Json& body) {
  const Json* suffix = Field(body, "suffix");
  if (suffix != nullptr &&
      !(suffix->is_string() && suffix->get_ref<const std::string&>().empty())) {
    return NotSupported("suffix", " by this server");
  }
  std::optional<int64_t> best_of;
  TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadOptionalInt(body, "best_of", &best_of));
  if (best_of && *best_of != 1) return NotSupported("best_of", " (only 1)");
  return std::nullopt;
}

MaybeError ReadSeed(const Json& body, uint64_t* seed, bool* has_seed) {
  const Json* v = Field(body, "seed");
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer() || (!v->is_number_unsigned() && v->get<int64_t>() < 0)) {
    return BadRequest("seed", "'seed' must be a non-negative integer");
  }
  *seed = v->is_number_unsigned() ? v->get<uint64_t>() : uint64_t(v->get<int64_t>());
  *has_seed = true;
  return std::nullopt;
}

MaybeError ReadSampling(const Json& body, SamplingParams* p, bool* has_seed) {
  p->temperature = 1.0f;  // OpenAI's default; 0 asks for greedy decoding
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k;
  TANDEM_RETURN_IF_API_ERROR(
      openai_internal::ReadOptionalNumber(body, "temperature", &temperature));
  TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadOptionalNumber(body, "top_p", &top_p));
  TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadOptionalNumber(body, "min_p", &min_p));
  TANDEM_RETURN_IF_API_ERROR(
      openai_internal::ReadOptionalNumber(body, "repetition_penalty", &repetition_penalty));
  TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadOptionalInt(body, "top_k", &top_k));
  if (temperature) p->temperature = float(*temperature);
  if (top_p) p->top_p = float(*top_p);
  if (min_p) p->min_p = float(*min_p);
  if (repetition_penalty) p->repetition_penalty = float(*repetition_penalty);
  if (top_k) {
    // -1 is a common spelling of "off" (vLLM); the sampler spells it 0.
    if (*top_k == -1) *top_k = 0;
    if (*top_k < 0 || *top_k > std::numeric_limits<int32_t>::max()) {
      return BadRequest("top_k", "'top_k' must be >= 0 (0 or -1: off)");
    }
    p->top_k = int32_t(*top_k);
  }
  TANDEM_RETURN_IF_API_ERROR(ReadSeed(body, &p->seed, has_seed));
  if (Status s = p->Validate(); !s.ok()) {
    // Validate's messages start with the parameter's name.
    const std::string& m = s.message();
    return BadRequest(m.substr(0, m.find(' ')), m);
  }
  return std::nullopt;
}

MaybeError ReadStop(const Json& body, std::vector<std::string>* stop) {
  const Json* v = Field(body, "stop");
  if (v == nullptr) return std::nullopt;
  const std::string kShape = "'stop' must be a string or an array of at most " + std::to_string(kMaxStopStrings) + " strings";
  std::vector<std::string> strings;
  if (v->is_string()) {
    strings.emplace_back();
    TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadString(*v, "stop", &strings.back()));
  } else if (v->is_array() && v->size() <= kMaxStopStrings) {
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) return BadRequest("stop", kShape);
      strings.emplace_back();
      TANDEM_RETURN_IF_API_ERROR(
          openai_internal::ReadString((*v)[i], "stop[" + std::to_string(i) + "]", &strings.back()));
    }
  } else {
    return BadRequest("stop", kShape);
  }
  // An empty stop string would match before the first token; it carries no
  // intent, so it is dropped rather than refused.
  std::erase_if(strings, [](const std::string& s) { return s.empty(); });
  // Their work per token is bounded by the automaton (runtime/stop_strings.h),
  // their memory by this.
  size_t bytes = 0;
  for (const std::string& s : strings) bytes += s.size();
  if (bytes > kMaxStopBytes) {
    return BadRequest("stop", "'stop' holds " + std::to_string(bytes) + " bytes; at most " +
                                  std::to_string(kMaxStopBytes) + " are taken, all strings together");
  }
  *stop = std::move(strings);
  return std::nullopt;
}

// max_completion_tokens is OpenAI's current name; max_tokens the older one.
// 0 only with echo: the prompt's logprobs alone.
MaybeError ReadMaxTokens(const Json& body, const ModelInfo& model, bool echo, std::optional<int64_t>* out) {
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    std::optional<int64_t> v;
    TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadOptionalInt(body, key, &v));
    if (!v) continue;
    const int64_t least = echo ? 0 : 1;
    if (*v < least || *v > model.context_length) {
      return BadRequest(key, std::string("'") + key + "' must be between " + std::to_string(least) + " and " +
                                 std::to_string(model.context_length) + " (the context length)" +
                                 (echo ? "" : "; 0 only with 'echo'"));
    }
    *out = v;
    return std::nullopt;
  }
  return std::nullopt;
}

MaybeError ReadStreaming(const Json& body, ParsedRequest* req) {
  TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadOptionalBool(body, "stream", &req->stream));
  const Json* options = Field(body, "stream_options");
  if (options == nullptr) return std::nullopt;
  if (!options->is_object()) {
    return BadRequest("stream_options", "'stream_options' must be an object");
  }
  bool include_usage = false;
  if (auto e = openai_internal::ReadOptionalBool(*options, "include_usage", &include_usage)) {
    e->param = "stream_options.include_usage";
    e->message = "'stream_options.include_usage' must be a boolean";
    return e;
  }
  req->include_usage = req->stream && include_usage;
  return std::nullopt;
}

// Chat: "logprobs": bool, "top_logprobs": 0..20 (only with logprobs true).
// Completions (the legacy API): "logprobs": null or 0..20, the number of
// alternatives. Either way spec.logprobs is -1 (none) or the top count.
MaybeError ReadLogprobs(const Json& body, const ModelInfo& model, bool chat, ParsedRequest* req) {
  const Json* lp = Field(body, "logprobs");
  const Json* top = Field(body, "top_logprobs");
  const std::string range = "between 0 and " + std::to_string(kMaxTopLogprobs);
  if (chat) {
    bool on = false;
    TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadOptionalBool(body, "logprobs", &on));
    std::optional<int64_t> n;
    TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadOptionalInt(body, "top_logprobs", &n));
    if (n && (*n < 0 || *n > kMaxTopLogprobs)) return BadRequest("top_logprobs", "'top_logprobs' must be " + range);
    if (n && !on) return BadRequest("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (on) req->spec.logprobs = int32_t(n.value_or(0));
  } else {
    if (top != nullptr) {
      return BadRequest("top_logprobs", "'top_logprobs' is a chat field; completions take 'logprobs': N");
    }
    if (lp != nullptr && !lp->is_null() && !(lp->is_boolean() && !lp->get<bool>())) {
      if (!lp->is_number_integer() || lp->get<int64_t>() < 0 || lp->get<int64_t>() > kMaxTopLogprobs) {
        return BadRequest("logprobs", "'logprobs' must be an integer " + range + " (alternatives per token)");
      }
      req->spec.logprobs = int32_t(lp->get<int64_t>());
    }
  }
  if (req->spec.logprobs >= 0 && !model.logprobs) {
    return NotSupported("logprobs",
                        " by a disaggregated decode server yet (its first token is sampled at the prefill engine); "
                        "ask a colocated `tandem serve`");
  }
  return std::nullopt;
}

MaybeError ReadStreamExtensions(const Json& body, const ModelInfo& model, ParsedRequest* req);
MaybeError ReadCacheSalt(const Json& body, ParsedRequest* req);

MaybeError ReadCommonFields(const nlohmann::ordered_json& ordered, const Json& body, const ModelInfo& model, ParsedRequest* req,
                            std::optional<int64_t>* max_tokens) {
  TANDEM_RETURN_IF_API_ERROR(ReadModel(body, model, &req->model));
  TANDEM_RETURN_IF_API_ERROR(RejectUnsupported(body));
  std::optional<int64_t> n;
  TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadOptionalInt(body, "n", &n));
  if (n && (*n < 1 || *n > kMaxChoices)) {
    return BadRequest("n", "'n' must be between 1 and " + std::to_string(kMaxChoices));
  }
  req->n = int(n.value_or(1));
  TANDEM_RETURN_IF_API_ERROR(ReadStreaming(body, req));
  TANDEM_RETURN_IF_API_ERROR(ReadSampling(body, &req->spec.sampling, &req->has_seed));
  TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadLogitControls(body, model, &req->spec.sampling));
  TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadResponseFormat(ordered, body, &req->spec.sampling.constraint));
  TANDEM_RETURN_IF_API_ERROR(ReadStop(body, &req->spec.stop));
  // echo (completions): the prompt comes back before the answer, with its
  // tokens' logprobs when logprobs are asked.
  TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadOptionalBool(body, "echo", &req->echo));
  if (req->echo && req->chat) return NotSupported("echo", " in chat completions (it is a completions field)");
  if (req->echo && !model.logprobs) {
    return NotSupported("echo", " by a disaggregated decode server yet (the prompt's logits live at the prefill engine); "
                        "ask a colocated `tandem serve`");
  }
  TANDEM_RETURN_IF_API_ERROR(ReadMaxTokens(body, model, req->echo, max_tokens));
  TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadOptionalBool(body, "return_token_ids", &req->return_token_ids));
  TANDEM_RETURN_IF_API_ERROR(ReadStreamExtensions(body, model, req));
  TANDEM_RETURN_IF_API_ERROR(ReadCacheSalt(body, req));
  TANDEM_RETURN_IF_API_ERROR(ReadLogprobs(body, model, req->chat, req));
  req->spec.prompt_logprobs = req->echo && req->spec.logprobs >= 0;
  return openai_internal::ReadOptionalBool(body, "ignore_eos", &req->spec.ignore_eos);
}

// Token ids given directly: each must name a token of this vocab.
MaybeError ReadTokenIds(const Json& ids, const ModelInfo& model, std::vector<int32_t>* out,
                        const std::string& param = "prompt") {
  const int32_t vocab = model.tokenizer->vocab_size();
  for (const Json& id : ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab ||
        (id.is_number_unsigned() && id.get<uint64_t>() >= uint64_t(vocab))) {
      return BadRequest(
          param, "'" + param + "' token ids must be integers in [0, " + std::to_string(vocab) + ")");
    }
    out->push_back(int32_t(id.get<int64_t>()));
  }
  return std::nullopt;
}

// "cache_salt": a non-empty string of at most 256 bytes (null: none).
MaybeError ReadCacheSalt(const Json& body, ParsedRequest* req) {
  const Json* v = Field(body, "cache_salt");
  if (v == nullptr) return std::nullopt;
  std::string salt;
  if (!v->is_string()) return BadRequest("cache_salt", "'cache_salt' must be a string");
  TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadString(*v, "cache_salt", &salt));
  if (salt.empty() || salt.size() > 256) {
    return BadRequest("cache_salt", "'cache_salt' must hold 1 to 256 bytes");
  }
  req->cache_salt = std::move(salt);
  return std::nullopt;
}

// "tandem_trace": true and "tandem_resume": {"id", "created", "choices":
// [{"tokens": [...], "started": bool, "done": bool}, one per choice]}.
MaybeError ReadStreamExtensions(const Json& body, const ModelInfo& model, ParsedRequest* req) {
  TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadOptionalBool(body, "tandem_trace", &req->trace));
  if (req->trace && !req->stream) return BadRequest("tandem_trace", "'tandem_trace' needs 'stream': true");
  const Json* v = Field(body, "tandem_resume");
  if (v == nullptr) return std::nullopt;
  if (!req->stream) return BadRequest("tandem_resume", "'tandem_resume' needs 'stream': true");
  if (!v->is_object()) return BadRequest("tandem_resume", "'tandem_resume' must be an object");
  if (!req->has_seed) {  // a fresh seed would continue another answer
    return BadRequest("tandem_resume", "'tandem_resume' needs the 'seed' the answer began with");
  }
  const std::string shape =
      "'tandem_resume' must be {\"id\": integer, \"created\": integer, \"choices\": [{\"tokens\": [ids], "
      "\"started\": bool, \"done\": bool}, one per choice]}";
  const Json* id = Field(*v, "id");
  const Json* created = Field(*v, "created");
  const Json* choices = Field(*v, "choices");
  if (id == nullptr || !id->is_number_unsigned() || created == nullptr || !created->is_number_integer() ||
      choices == nullptr || !choices->is_array() || choices->size() != size_t(req->n)) {
    return BadRequest("tandem_resume", shape);
  }
  ParsedRequest::Resume r;
  r.id = id->get<uint64_t>();
  r.created = created->get<int64_t>();
  for (size_t i = 0; i < choices->size(); ++i) {
    const Json& c = (*choices)[i];
    const Json* tokens = c.is_object() ? Field(c, "tokens") : nullptr;
    if (tokens == nullptr || !tokens->is_array() || tokens->size() > size_t(model.context_length)) {
      return BadRequest("tandem_resume", shape);
    }
    r.choices.emplace_back();
    TANDEM_RETURN_IF_API_ERROR(ReadTokenIds(*tokens, model, &r.choices.back().tokens, "tandem_resume"));
    TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadOptionalBool(c, "started", &r.choices.back().started));
    TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadOptionalBool(c, "done", &r.choices.back().done));
    if (!r.choices.back().started && !r.choices.back().tokens.empty()) {
      return BadRequest("tandem_resume", "'tandem_resume' choice " + std::to_string(i) + " has tokens but did not start");
    }
  }
  req->resume = std::move(r);
  return std::nullopt;
}

bool AllOf(const Json& array, bool (Json::*predicate)() const noexcept) {
  return std::all_of(array.begin(), array.end(), [&](const Json& v) { return (v.*predicate)(); });
}

MaybeError ReadCompletionPrompt(const Json& body, const ModelInfo& model,
                                std::vector<int32_t>* tokens, std::string* prompt_text) {
  const Json* v = Field(body, "prompt");
  if (v == nullptr) return BadRequest("prompt", "'prompt' is required");
  const Tokenizer& tok = *model.tokenizer;
  if (v->is_array() && v->size() == 1 && ((*v)[0].is_string() || (*v)[0].is_array())) {
    v = &(*v)[0];  // a batch of one is the same as the one
  }
  if (v->is_string()) {
    std::string text;
    TANDEM_RETURN_IF_API_ERROR(openai_internal::ReadString(*v, "prompt", &text));
    TANDEM_RETURN_IF_API_ERROR(openai_internal::CheckPromptBytes(text.size(), model, "prompt"));
    *tokens = tok.Encode(text, tok.add_bos(), /*parse_special=*/true);
    *prompt_text = std::move(text);
  } else if (v->is_array() && !v->empty() && AllOf(*v, &Json::is_number)) {
    TANDEM_RETURN_IF_API_ERROR(ReadTokenIds(*v, model, tokens));
    for (int32_t t : *tokens) *prompt_text += tok.TokenBytes(t);
  } else if (v->is_array() && v->size() > 1 &&
             (AllOf(*v, &Json::is_string) || AllOf(*v, &Json::is_array))) {
    return BadRequest("prompt", "batched prompts are not supported; send one prompt per request");
  } else {
    return BadRequest(
        "prompt", "'prompt' must be a string, an array of one string, or an array of token ids");
  }
  if (tokens->empty()) return BadRequest("prompt", "'prompt' must not be empty");
  return std::nullopt;
}

}  // namespace

namespace openai_internal {

MaybeError CheckPromptBytes(size_t bytes, const ModelInfo& model, const char* param) {
  const size_t per_token = model.tokenizer->max_token_bytes() + 1;  // + a leading space an encoder may add
  if (bytes / per_token < size_t(model.context_length)) return std::nullopt;
  return BadRequest(param,
                    "the prompt is " + std::to_string(bytes) + " bytes: at least " + std::to_string(bytes / per_token) +
                        " tokens, more than the context holds (" + std::to_string(model.context_length) + ")",
                    "context_length_exceeded");
}

}  // namespace openai_internal

namespace {

// The prompt and the answer share the context: at least one token must fit
// after the prompt, and max_tokens is clamped to what is left.
MaybeError ApplyContextLimit(std::optional<int64_t> requested, const ModelInfo& model,
                             const char* prompt_param, RequestSpec* spec) {
  const int64_t prompt = int64_t(spec->prompt.size());
  if (prompt + 1 > model.context_length) {
    return BadRequest(prompt_param,
                      "the prompt has " + std::to_string(prompt) +
                          " tokens but the context holds " + std::to_string(model.context_length) +
                          "; at least one token must be left to generate",
                      "context_length_exceeded");
  }
  const int64_t room = model.context_length - prompt;
  const int64_t max_tokens =
      requested ? std::min(*requested, room) : std::min(room, kDefaultMaxTokens);
  spec->max_tokens = int32_t(std::min<int64_t>(max_tokens, std::numeric_limits<int32_t>::max()));
  return std::nullopt;
}

ParseResult ParseRequest(std::string_view body_text, const ModelInfo& model, bool chat) {
  TANDEM_CHECK(model.tokenizer != nullptr);
  Json body;
  TANDEM_RETURN_IF_API_ERROR(openai_internal::ParseBody(body_text, &body));
  ParsedRequest req;
  req.chat = chat;
  try {
    std::optional<int64_t> max_tokens;
    // The body again with its key order kept, for what prints or generates in
    // the client's order: schemas and tool parameters.
    nlohmann::ordered_json ordered;
    if (Field(body, "tools") != nullptr || Field(body, "response_format") != nullptr) {
      ordered = nlohmann::ordered_json::parse(body_text, nullptr, false);
      if (ordered.is_discarded()) ordered = nullptr;  // parsed once already: cannot happen
    }
    TANDEM_RETURN_IF_API_ERROR(ReadCommonFields(ordered, body, model, &req, &max_tokens));
    const char* constraint_param = "response_format";
    if (chat) {
      std::string forced;
      TANDEM_RETURN_IF_API_ERROR(openai_internal::BuildChatPrompt(body, ordered, model, &req.spec.prompt,
                                                                  &req.tools_enabled, &req.tool_format, &forced));
      TANDEM_RETURN_IF_API_ERROR(
          openai_internal::ReadOptionalBool(body, "parallel_tool_calls", &req.parallel_tool_calls));
      if (!forced.empty()) {
        if (!req.spec.sampling.constraint.empty()) {
          return BadRequest("response_format", "'response_format' and a forced 'tool_choice' cannot both shape the answer");
        }
        req.spec.sampling.constraint = std::move(forced);
        constraint_param = "tool_choice";
      }
    } else {
      TANDEM_RETURN_IF_API_ERROR(ReadCompletionPrompt(body, model, &req.spec.prompt, &req.echo_text));
      if (!req.echo) req.echo_text.clear();
    }
    TANDEM_RETURN_IF_API_ERROR(
        ApplyContextLimit(max_tokens, model, chat ? "messages" : "prompt", &req.spec));
    TANDEM_RETURN_IF_API_ERROR(openai_internal::CheckConstraint(constraint_param, &req.spec));
  } catch (const Json::exception& e) {
    // Every read checks the type first, so this is a missed check; the
    // input is still what provoked it, hence a 400 rather than a crash.
    return BadRequest("", std::string("malformed request: ") + e.what());
  }
  return req;
}

}  // namespace

ParseResult ParseChatCompletionRequest(std::string_view body, const ModelInfo& model) {
  return ParseRequest(body, model, /*chat=*/true);
}

ParseResult ParseCompletionRequest(std::string_view body, const ModelInfo& model) {
  return ParseRequest(body, model, /*chat=*/false);
}

}  // namespace tandem
