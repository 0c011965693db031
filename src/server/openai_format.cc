// What shapes the answer beyond temperature and top-p: response_format
// (structured outputs), forced tool calls' grammar check, the OpenAI
// penalties and logit_bias.
#include <algorithm>
#include <charconv>

#include "structured/json_schema.h"
#include "server/openai_api.h"
#include "server/openai_json.h"

namespace tandem::openai_internal {

// {"type": "text"} (or none): free text. {"type": "json_object"}: any JSON
// object. {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}:
// a value the schema accepts. The schema is read from `ordered`, the body with
// its key order kept, so objects list their properties as the schema does.
MaybeError ReadResponseFormat(const nlohmann::ordered_json& ordered, const Json& body, std::string* constraint) {
  const Json* format = Field(body, "response_format");
  if (format == nullptr) return std::nullopt;
  const Json* type = format->is_object() ? Field(*format, "type") : nullptr;
  if (type == nullptr || !type->is_string()) {
    return BadRequest("response_format", "'response_format' must be an object with a string 'type'");
  }
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    *constraint = "json_object";
    return std::nullopt;
  }
  if (t != "json_schema") {
    return BadRequest("response_format.type",
                      "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", not \"" + t + "\"");
  }
  const Json* spec = Field(*format, "json_schema");
  if (spec == nullptr || !spec->is_object() || Field(*spec, "schema") == nullptr) {
    return BadRequest("response_format.json_schema",
                      "'response_format.json_schema' must be an object with a 'schema'");
  }
  if (!ordered.is_object()) return BadRequest("response_format", "the body could not be read in order");
  *constraint = "json_schema " + Dump(ordered.at("response_format").at("json_schema").at("schema"));
  return std::nullopt;
}

MaybeError ReadLogitControls(const Json& body, const ModelInfo& model, SamplingParams* p) {
  for (const char* key : {"frequency_penalty", "presence_penalty"}) {
    std::optional<double> v;
    TANDEM_RETURN_IF_API_ERROR(ReadOptionalNumber(body, key, &v));
    if (!v) continue;
    if (!(*v >= -2.0 && *v <= 2.0)) return BadRequest(key, std::string("'") + key + "' must be between -2 and 2");
    (std::string_view(key) == "frequency_penalty" ? p->frequency_penalty : p->presence_penalty) = float(*v);
  }
  const Json* bias = Field(body, "logit_bias");
  if (bias == nullptr) return std::nullopt;
  const std::string shape = "'logit_bias' must map token ids (as strings) to numbers between -100 and 100";
  if (!bias->is_object()) return BadRequest("logit_bias", shape);
  if (bias->size() > SamplingParams::kMaxLogitBias) {
    return BadRequest("logit_bias", "'logit_bias' may name at most " + std::to_string(SamplingParams::kMaxLogitBias) +
                                        " tokens");
  }
  for (const auto& [key, value] : bias->items()) {
    int64_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || id < 0 || id >= model.tokenizer->vocab_size()) {
      return BadRequest("logit_bias", "'logit_bias' key '" + key.substr(0, 32) + "' is not a token id in [0, " +
                                          std::to_string(model.tokenizer->vocab_size()) + ")");
    }
    if (!value.is_number() || !(value.get<double>() >= -100.0 && value.get<double>() <= 100.0)) {
      return BadRequest("logit_bias", shape);
    }
    p->logit_bias.push_back({int32_t(id), float(value.get<double>())});
  }
  std::sort(p->logit_bias.begin(), p->logit_bias.end());  // by id: one order however the client sent them
  return std::nullopt;
}

// A constrained answer must fit in max_tokens: its grammar's shortest
// sentence (in bytes, and every byte has a token) is checked here, so the
// engine never starts an answer it cannot finish.
MaybeError CheckConstraint(const char* param, RequestSpec* spec) {
  if (spec->sampling.constraint.empty()) return std::nullopt;
  if (spec->sampling.constraint.size() > SamplingParams::kMaxConstraintBytes) {
    return BadRequest(param, std::string("'") + param + "' is over 1 MiB");
  }
  StatusOr<std::shared_ptr<const Grammar>> grammar = CompileConstraint(spec->sampling.constraint);
  if (!grammar.ok()) return BadRequest(param, std::string("'") + param + "': " + grammar.status().message());
  const int64_t least = (*grammar)->MinBytesToAccept((*grammar)->Start());
  if (least > spec->max_tokens) {
    return BadRequest("max_tokens", "the shortest answer '" + std::string(param) + "' allows takes " +
                                        std::to_string(least) + " tokens, more than max_tokens (" +
                                        std::to_string(spec->max_tokens) + ")");
  }
  spec->sampling.answer_budget = spec->max_tokens;
  return std::nullopt;
}

}  // namespace tandem::openai_internal
