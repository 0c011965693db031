// Structured outputs: a JSON schema (or "any JSON object") compiled into a
// byte grammar (structured/grammar.h) whose sentences are the compact JSON texts
// (no whitespace) the schema accepts.
//
// A request's constraint travels as text (SamplingParams::constraint), so the
// engine that samples its first token and the one that samples the rest
// compile the same grammar from it:
//   "json_object"           any JSON object
//   "json_schema " + JSON   a value the schema accepts
//   "tool_calls " + {"tools": [{"name", "parameters"}], "key", "max_calls",
//                    "call_prefix", "call_suffix", "open", "separator", "close"}
//                           1..max_calls tool calls {"name": ..., key: arguments}
//                           in a template's format (a forced tool_choice); each
//                           tool's parameters are their own schema root
//
// The schema subset: type (one or a list), properties, required,
// additionalProperties (true, false or a schema), items, minItems, maxItems,
// enum, const, anyOf, $ref to "#", "#/$defs/..." or "#/definitions/...",
// minLength, maxLength; annotations (title, description, default, examples,
// $schema, $id, $comment, strict) are ignored. Any other keyword is refused by
// name with its location, never ignored. Objects list their properties in the
// schema's order; optional ones may be left out. Numbers have at most 15
// digits before and after the point and a two-digit exponent, so every answer
// parses to a finite double.
#pragma once

#include <memory>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "structured/grammar.h"

namespace tandem {

StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(const nlohmann::ordered_json& schema);
StatusOr<std::shared_ptr<const Grammar>> CompileJsonObject();
// Dispatches on the constraint text above.
StatusOr<std::shared_ptr<const Grammar>> CompileConstraint(std::string_view constraint);

}  // namespace tandem
