// Random JSON schemas in the subset structured/json_schema.h compiles, for tests
// that check constrained answers against a real validator (python3-jsonschema).
#pragma once

#include <nlohmann/json.hpp>
#include <random>
#include <string>

namespace tandem::testing {

class RandomSchema {
 public:
  explicit RandomSchema(uint32_t seed) : rng_(seed) {}

  nlohmann::ordered_json Make() {
    nlohmann::ordered_json s = Value(0);
    if (Coin(0.2)) {  // a definition used through $ref
      s = {{"type", "object"},
           {"properties", {{"item", {{"$ref", "#/$defs/thing"}}}, {"more", {{"type", "array"}, {"items", {{"$ref", "#/$defs/thing"}}}, {"maxItems", 2}}}}},
           {"required", {"item"}},
           {"$defs", {{"thing", Value(1)}}}};
    }
    return s;
  }

 private:
  bool Coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  std::string Name() {
    static const char* kNames[] = {"id", "name", "count", "tags", "ok", "score", "note", "kind", "x", "é_ü", "a b", "q\"t"};
    return kNames[Int(0, 11)];
  }

  nlohmann::ordered_json Value(int depth) {
    using J = nlohmann::ordered_json;
    const int pick = depth >= 3 ? Int(0, 6) : Int(0, 10);
    switch (pick) {
      case 0: {
        J s = {{"type", "string"}};
        if (Coin(0.3)) s["maxLength"] = Int(0, 8);
        if (Coin(0.3)) s["minLength"] = Int(0, s.contains("maxLength") ? s["maxLength"].get<int>() : 4);
        return s;
      }
      case 1: return {{"type", "integer"}};
      case 2: return {{"type", "number"}};
      case 3: return {{"type", "boolean"}};
      case 4: return {{"type", Coin(0.5) ? J{"string", "null"} : J{"integer", "null"}}};
      case 5: return {{"enum", J{"red", "green", 3, nullptr, J{{"k", 1}}}}};
      case 6: return {{"const", Coin(0.5) ? J("fixed \"value\"") : J(42)}};
      case 7:
      case 8: {
        J props = J::object(), required = J::array();
        const int n = Int(1, 4);
        for (int i = 0; i < n; ++i) {
          const std::string name = Name();
          if (props.contains(name)) continue;
          props[name] = Value(depth + 1);
          if (Coin(0.6)) required.push_back(name);
        }
        J s = {{"type", "object"}, {"properties", props}, {"required", required}};
        if (Coin(0.5)) s["additionalProperties"] = false;
        return s;
      }
      case 9: {
        J s = {{"type", "array"}, {"items", Value(depth + 1)}};
        if (Coin(0.5)) s["minItems"] = Int(0, 2);
        if (Coin(0.5)) s["maxItems"] = (s.contains("minItems") ? s["minItems"].get<int>() : 0) + Int(0, 3);
        return s;
      }
      default: return {{"anyOf", J{Value(depth + 1), Value(depth + 1)}}};
    }
  }

  std::mt19937 rng_;
};

}  // namespace tandem::testing
