#include "structured/json_schema.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

namespace tandem {
namespace {

using OJson = nlohmann::ordered_json;

constexpr size_t kMaxGrammarSymbols = size_t(1) << 18;
constexpr int kMaxDepth = 64;
constexpr int64_t kMaxRepeat = 4096;  // minItems / maxItems / minLength / maxLength
constexpr size_t kMaxAlternatives = 1024;  // properties of one object, enum values
constexpr size_t kMaxAnyOf = 64;           // anyOf branches: each is a parse kept alive at once

const std::set<std::string>& Annotations() {
  static const std::set<std::string> k = {"title", "description", "default", "examples", "$schema",
                                           "$id",   "$comment",    "strict",  "$defs",    "definitions"};
  return k;
}
const std::set<std::string>& Keywords() {
  static const std::set<std::string> k = {"type",     "properties", "required", "additionalProperties",
                                           "items",    "minItems",   "maxItems", "enum",
                                           "const",    "anyOf",      "$ref",     "minLength",
                                           "maxLength"};
  return k;
}

std::string Where(const std::string& path) { return path.empty() ? "#" : "#" + path; }

class SchemaCompiler {
 public:
  // root: what "#" refers to. Several compilers may add to one builder.
  SchemaCompiler(const OJson& root, GrammarBuilder& b) : root_(root), b_(b) {}

  StatusOr<int32_t> Value(const OJson& s, const std::string& path, int depth);
  int32_t AnyObject();
  int32_t Rule(std::vector<GrammarBuilder::Sequence> alternatives) {
    const int32_t r = b_.Rule();
    for (auto& a : alternatives) b_.Alternative(r, std::move(a));
    return r;
  }
  // item (separator item)* with min..max items.
  int32_t List(int32_t item, int64_t min, int64_t max, uint8_t separator = ',');

 private:
  StatusOr<int32_t> Typed(const OJson& s, const std::string& type, const std::string& path, int depth);
  StatusOr<int32_t> Object(const OJson& s, const std::string& path, int depth);
  StatusOr<int32_t> Array(const OJson& s, const std::string& path, int depth);
  StatusOr<int32_t> String(const OJson& s, const std::string& path);
  StatusOr<int32_t> Ref(const std::string& ref, const std::string& path, int depth);
  StatusOr<int32_t> Literals(const std::vector<const OJson*>& values, const std::string& path);
  int32_t LiteralTrie(const std::vector<std::string>& texts, size_t begin, size_t end, size_t depth);
  StatusOr<int64_t> Count(const OJson& s, const char* key, int64_t fallback, const std::string& path);

  // sym repeated min..max times (max -1: unbounded).
  int32_t Repeat(int32_t sym, int64_t min, int64_t max);
  int32_t Digits(int64_t min, int64_t max) { return Repeat(b_.Set(ByteSet().Add('0', '9')), min, max); }
  int32_t Char();
  int32_t FreeString();
  int32_t Integer();
  int32_t Number();
  int32_t AnyValue();
  int32_t Text(std::string_view text) {
    GrammarBuilder::Sequence seq;
    b_.Literal(seq, text);
    return Rule({seq});
  }
  Status TooLarge() const {
    return b_.size() > kMaxGrammarSymbols
               ? InvalidArgument("the schema is too large (its grammar passes 2^18 symbols)")
               : Status::Ok();
  }

  const OJson& root_;
  GrammarBuilder& b_;
  std::map<std::string, int32_t> refs_;
  int32_t char_ = -1, string_ = -1, integer_ = -1, number_ = -1, any_ = -1, any_object_ = -1;
};

int32_t SchemaCompiler::Repeat(int32_t sym, int64_t min, int64_t max) {
  int32_t tail;
  if (max < 0) {
    tail = b_.Rule();
    b_.Alternative(tail, {sym, tail});
    b_.Alternative(tail, {});
  } else {
    tail = Rule({{}});
    for (int64_t i = min; i < max && b_.size() <= kMaxGrammarSymbols; ++i) tail = Rule({{sym, tail}, {}});
  }
  GrammarBuilder::Sequence seq(size_t(min), sym);
  seq.push_back(tail);
  return Rule({seq});
}

int32_t SchemaCompiler::List(int32_t item, int64_t min, int64_t max, uint8_t separator) {
  if (max == 0) return Rule({{}});
  const int32_t comma_item = Rule({{b_.Byte(separator), item}});
  const int32_t some = Rule({{item, Repeat(comma_item, std::max<int64_t>(min, 1) - 1, max < 0 ? -1 : max - 1)}});
  return min == 0 ? Rule({{some}, {}}) : some;
}

// One character of a JSON string: printable ASCII but '"' and '\', an escape
// (\u only outside the surrogates), or a well-formed UTF-8 sequence.
int32_t SchemaCompiler::Char() {
  if (char_ >= 0) return char_;
  auto set = [&](uint8_t lo, uint8_t hi) { return b_.Set(ByteSet().Add(lo, hi)); };
  const int32_t cont = set(0x80, 0xBF), hex = b_.Set(ByteSet().Add('0', '9').Add('a', 'f').Add('A', 'F'));
  const int32_t bs = b_.Byte('\\'), u = b_.Byte('u');
  char_ = Rule({{b_.Set(ByteSet().Add(0x20, 0x21).Add(0x23, 0x5B).Add(0x5D, 0x7F))},
                {bs, b_.Set(ByteSet().Add('"').Add('\\').Add('/').Add('b').Add('f').Add('n').Add('r').Add('t'))},
                {bs, u, b_.Set(ByteSet().Add('0', '9').Add('a', 'c').Add('A', 'C').Add('e', 'f').Add('E', 'F')), hex, hex, hex},
                {bs, u, b_.Set(ByteSet().Add('d').Add('D')), set('0', '7'), hex, hex},
                {set(0xC2, 0xDF), cont},
                {b_.Byte(0xE0), set(0xA0, 0xBF), cont},
                {set(0xE1, 0xEC), cont, cont},
                {b_.Byte(0xED), set(0x80, 0x9F), cont},
                {set(0xEE, 0xEF), cont, cont},
                {b_.Byte(0xF0), set(0x90, 0xBF), cont, cont},
                {set(0xF1, 0xF3), cont, cont, cont},
                {b_.Byte(0xF4), set(0x80, 0x8F), cont, cont}});
  return char_;
}

int32_t SchemaCompiler::FreeString() {
  if (string_ < 0) string_ = Rule({{b_.Byte('"'), Repeat(Char(), 0, -1), b_.Byte('"')}});
  return string_;
}

int32_t SchemaCompiler::Integer() {
  if (integer_ >= 0) return integer_;
  const int32_t magnitude = Rule({{b_.Byte('0')}, {b_.Set(ByteSet().Add('1', '9')), Digits(0, 14)}});
  integer_ = Rule({{magnitude}, {b_.Byte('-'), magnitude}});
  return integer_;
}

int32_t SchemaCompiler::Number() {
  if (number_ >= 0) return number_;
  const int32_t frac = Rule({{b_.Byte('.'), Digits(1, 15)}});
  const int32_t exp = Rule({{b_.Set(ByteSet().Add('e').Add('E')), Rule({{b_.Set(ByteSet().Add('+').Add('-'))}, {}}),
                             Digits(1, 2)}});
  const int32_t i = Integer();
  number_ = Rule({{i}, {i, frac}, {i, exp}, {i, frac, exp}});
  return number_;
}

int32_t SchemaCompiler::AnyValue() {
  if (any_ >= 0) return any_;
  any_ = b_.Rule();  // first, so objects and arrays can hold values
  const int32_t array = Rule({{b_.Byte('['), List(any_, 0, -1), b_.Byte(']')}});
  for (const GrammarBuilder::Sequence& alt : std::vector<GrammarBuilder::Sequence>{
           {AnyObject()}, {array}, {FreeString()}, {Number()}, {Text("true")}, {Text("false")}, {Text("null")}}) {
    b_.Alternative(any_, alt);
  }
  return any_;
}

int32_t SchemaCompiler::AnyObject() {
  if (any_object_ >= 0) return any_object_;
  any_object_ = b_.Rule();
  const int32_t kv = Rule({{FreeString(), b_.Byte(':'), AnyValue()}});
  b_.Alternative(any_object_, {b_.Byte('{'), List(kv, 0, -1), b_.Byte('}')});
  return any_object_;
}

StatusOr<int64_t> SchemaCompiler::Count(const OJson& s, const char* key, int64_t fallback, const std::string& path) {
  auto it = s.find(key);
  if (it == s.end()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kMaxRepeat) {
    return InvalidArgument("'" + std::string(key) + "' at " + Where(path) + " must be an integer in [0, " +
                           std::to_string(kMaxRepeat) + "]");
  }
  return it->get<int64_t>();
}

StatusOr<int32_t> SchemaCompiler::Literals(const std::vector<const OJson*>& values, const std::string& path) {
  if (values.empty()) return InvalidArgument("the enum at " + Where(path) + " has no value of the schema's type");
  if (values.size() > kMaxAlternatives) return InvalidArgument("the enum at " + Where(path) + " has over 1024 values");
  std::vector<std::string> texts;
  for (const OJson* v : values) texts.push_back(v->dump(-1, ' ', false, OJson::error_handler_t::replace));
  std::sort(texts.begin(), texts.end());
  texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
  size_t bytes = 0;
  for (const std::string& t : texts) bytes += t.size();
  if (bytes > kMaxGrammarSymbols) return InvalidArgument("the values at " + Where(path) + " are too large");
  return LiteralTrie(texts, 0, texts.size(), 0);
}

// The sorted texts[begin, end), which share their first `depth` bytes, as a
// byte trie: values with a common prefix are one parse until they differ,
// so a long enum keeps few parses alive. Recursion is one level per point
// where values part, at most one per value.
int32_t SchemaCompiler::LiteralTrie(const std::vector<std::string>& texts, size_t begin, size_t end, size_t depth) {
  std::vector<GrammarBuilder::Sequence> alts;
  if (texts[begin].size() == depth) alts.push_back({}), ++begin;
  for (size_t i = begin; i < end;) {
    size_t j = i;
    while (j < end && texts[j][depth] == texts[i][depth]) ++j;
    // The bytes all of [i, j) share (sorted: the first and last agree on them).
    size_t common = depth + 1;
    while (common < texts[i].size() && common < texts[j - 1].size() && texts[i][common] == texts[j - 1][common]) ++common;
    GrammarBuilder::Sequence seq;
    b_.Literal(seq, std::string_view(texts[i]).substr(depth, common - depth));
    if (!(j == i + 1 && texts[i].size() == common)) seq.push_back(LiteralTrie(texts, i, j, common));
    alts.push_back(std::move(seq));
    i = j;
  }
  return Rule(std::move(alts));
}

StatusOr<int32_t> SchemaCompiler::Value(const OJson& s, const std::string& path, int depth) {
  TANDEM_RETURN_IF_ERROR(TooLarge());
  if (depth > kMaxDepth) return InvalidArgument("the schema nests more than 64 deep at " + Where(path));
  if (s.is_boolean()) {
    if (s.get<bool>()) return AnyValue();
    return InvalidArgument("the schema at " + Where(path) + " is false: no value satisfies it");
  }
  if (!s.is_object()) return InvalidArgument("the schema at " + Where(path) + " must be an object or a boolean");
  size_t keywords = 0;
  for (const auto& [key, _] : s.items()) {
    if (Annotations().count(key)) continue;
    if (!Keywords().count(key)) return InvalidArgument("'" + key + "' (at " + Where(path) + ") is not supported");
    ++keywords;
  }
  if (auto it = s.find("$ref"); it != s.end()) {
    if (!it->is_string()) return InvalidArgument("'$ref' at " + Where(path) + " must be a string");
    if (keywords > 1) return InvalidArgument("'$ref' at " + Where(path) + " with other keywords is not supported");
    return Ref(it->get<std::string>(), path, depth);
  }
  if (auto it = s.find("anyOf"); it != s.end()) {
    if (!it->is_array() || it->empty()) return InvalidArgument("'anyOf' at " + Where(path) + " must be a non-empty array");
    if (it->size() > kMaxAnyOf) return InvalidArgument("'anyOf' at " + Where(path) + " has over 64 branches");
    if (keywords > 1) return InvalidArgument("'anyOf' at " + Where(path) + " with other keywords is not supported");
    const int32_t r = b_.Rule();
    for (size_t i = 0; i < it->size(); ++i) {
      TANDEM_ASSIGN_OR_RETURN(int32_t alt, Value((*it)[i], path + "/anyOf/" + std::to_string(i), depth + 1));
      b_.Alternative(r, {alt});
    }
    return r;
  }
  std::vector<std::string> types;
  if (auto it = s.find("type"); it != s.end()) {
    if (it->is_string()) {
      types.push_back(it->get<std::string>());
    } else if (it->is_array() && !it->empty() && std::all_of(it->begin(), it->end(), [](const OJson& t) { return t.is_string(); })) {
      for (const OJson& t : *it) types.push_back(t.get<std::string>());
    } else {
      return InvalidArgument("'type' at " + Where(path) + " must be a type name or a non-empty array of them");
    }
  }
  auto of_type = [&](const OJson& v) {
    if (types.empty()) return true;
    for (const std::string& t : types) {
      if ((t == "string" && v.is_string()) || (t == "integer" && v.is_number_integer()) ||
          (t == "number" && v.is_number()) || (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) ||
          (t == "object" && v.is_object()) || (t == "array" && v.is_array())) {
        return true;
      }
    }
    return false;
  };
  if (s.contains("const") || s.contains("enum")) {
    for (const auto& [key, _] : s.items()) {
      if (key != "const" && key != "enum" && key != "type" && !Annotations().count(key)) {
        return InvalidArgument("'" + key + "' beside '" + (s.contains("const") ? "const" : "enum") + "' (at " +
                               Where(path) + ") is not supported");
      }
    }
  }
  if (auto it = s.find("const"); it != s.end()) return Literals(of_type(*it) ? std::vector{&*it} : std::vector<const OJson*>{}, path);
  if (auto it = s.find("enum"); it != s.end()) {
    if (!it->is_array()) return InvalidArgument("'enum' at " + Where(path) + " must be an array");
    std::vector<const OJson*> values;
    for (const OJson& v : *it) {
      if (of_type(v)) values.push_back(&v);
    }
    return Literals(values, path);
  }
  if (types.empty()) {  // no type: what the keywords imply, else any value
    if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) types = {"object"};
    else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) types = {"array"};
    else if (s.contains("minLength") || s.contains("maxLength")) types = {"string"};
    else return AnyValue();
  }
  std::sort(types.begin(), types.end());
  types.erase(std::unique(types.begin(), types.end()), types.end());
  if (types.size() == 1) return Typed(s, types[0], path, depth);
  const int32_t r = b_.Rule();
  for (const std::string& t : types) {
    TANDEM_ASSIGN_OR_RETURN(int32_t alt, Typed(s, t, path, depth));
    TANDEM_RETURN_IF_ERROR(TooLarge());
    b_.Alternative(r, {alt});
  }
  return r;
}

StatusOr<int32_t> SchemaCompiler::Typed(const OJson& s, const std::string& type, const std::string& path, int depth) {
  if (type == "object") return Object(s, path, depth);
  if (type == "array") return Array(s, path, depth);
  if (type == "string") return String(s, path);
  if (type == "integer") return Integer();
  if (type == "number") return Number();
  if (type == "boolean") return Rule({{Text("true")}, {Text("false")}});
  if (type == "null") return Text("null");
  return InvalidArgument("type '" + type + "' at " + Where(path) + " is not a JSON schema type");
}

StatusOr<int32_t> SchemaCompiler::String(const OJson& s, const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(int64_t min, Count(s, "minLength", 0, path));
  TANDEM_ASSIGN_OR_RETURN(int64_t max, Count(s, "maxLength", -1, path));
  if (max >= 0 && max < min) return InvalidArgument("'maxLength' at " + Where(path) + " is below 'minLength'");
  if (min == 0 && max < 0) return FreeString();
  return Rule({{b_.Byte('"'), Repeat(Char(), min, max), b_.Byte('"')}});
}

StatusOr<int32_t> SchemaCompiler::Array(const OJson& s, const std::string& path, int depth) {
  TANDEM_ASSIGN_OR_RETURN(int64_t min, Count(s, "minItems", 0, path));
  TANDEM_ASSIGN_OR_RETURN(int64_t max, Count(s, "maxItems", -1, path));
  if (max >= 0 && max < min) return InvalidArgument("'maxItems' at " + Where(path) + " is below 'minItems'");
  int32_t item;
  if (auto it = s.find("items"); it != s.end()) {
    TANDEM_ASSIGN_OR_RETURN(item, Value(*it, path + "/items", depth + 1));
  } else {
    item = AnyValue();
  }
  return Rule({{b_.Byte('['), List(item, min, max), b_.Byte(']')}});
}

// The listed properties in the schema's order (optional ones may be left
// out); never others, which every additionalProperties allows.
StatusOr<int32_t> SchemaCompiler::Object(const OJson& s, const std::string& path, int depth) {
  struct Property {
    std::string name;
    int32_t value;
    bool required;
  };
  std::vector<Property> props;
  std::set<std::string> required;
  if (auto it = s.find("required"); it != s.end()) {
    if (!it->is_array()) return InvalidArgument("'required' at " + Where(path) + " must be an array of strings");
    for (const OJson& name : *it) {
      if (!name.is_string()) return InvalidArgument("'required' at " + Where(path) + " must be an array of strings");
      required.insert(name.get<std::string>());
    }
  }
  const OJson* extra = nullptr;
  if (auto it = s.find("additionalProperties"); it != s.end()) extra = &*it;
  const bool closed = extra != nullptr && extra->is_boolean() && !extra->get<bool>();
  if (auto it = s.find("properties"); it != s.end()) {
    if (!it->is_object()) return InvalidArgument("'properties' at " + Where(path) + " must be an object");
    if (it->size() > kMaxAlternatives) return InvalidArgument("'properties' at " + Where(path) + " has over 1024 names");
    for (const auto& [name, sub] : it->items()) {
      TANDEM_ASSIGN_OR_RETURN(int32_t v, Value(sub, path + "/properties/" + name, depth + 1));
      props.push_back({name, v, required.count(name) > 0});
    }
  }
  for (const std::string& name : required) {
    if (std::any_of(props.begin(), props.end(), [&](const Property& p) { return p.name == name; })) continue;
    if (closed) {
      return InvalidArgument("'required' at " + Where(path) + " names '" + name +
                             "', which 'properties' lacks and 'additionalProperties' forbids");
    }
    int32_t v = AnyValue();
    if (extra != nullptr && extra->is_object()) {
      TANDEM_ASSIGN_OR_RETURN(v, Value(*extra, path + "/additionalProperties", depth + 1));
    }
    props.push_back({name, v, true});
  }
  if (props.empty()) {
    if (closed) return Text("{}");
    if (extra == nullptr || extra->is_boolean()) return AnyObject();
    TANDEM_ASSIGN_OR_RETURN(int32_t v, Value(*extra, path + "/additionalProperties", depth + 1));
    const int32_t kv = Rule({{FreeString(), b_.Byte(':'), v}});
    return Rule({{b_.Byte('{'), List(kv, 0, -1), b_.Byte('}')}});
  }
  // rest[i][c]: properties i.. with a comma before the first written (c).
  std::vector<std::array<int32_t, 2>> rest(props.size() + 1);
  rest.back() = {Rule({{}}), Rule({{}})};
  for (size_t i = props.size(); i-- > 0;) {
    GrammarBuilder::Sequence key;
    b_.Literal(key, OJson(props[i].name).dump(-1, ' ', false, OJson::error_handler_t::replace) + ":");
    for (int c = 0; c < 2; ++c) {
      GrammarBuilder::Sequence written;
      if (c) written.push_back(b_.Byte(','));
      written.insert(written.end(), key.begin(), key.end());
      written.push_back(props[i].value);
      written.push_back(rest[i + 1][1]);
      if (props[i].required) {
        rest[i][size_t(c)] = Rule({written});
      } else {
        rest[i][size_t(c)] = Rule({written, {rest[i + 1][size_t(c)]}});
      }
    }
  }
  return Rule({{b_.Byte('{'), rest[0][0], b_.Byte('}')}});
}

StatusOr<int32_t> SchemaCompiler::Ref(const std::string& ref, const std::string& path, int depth) {
  if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
  if (ref.empty() || ref[0] != '#') {
    return InvalidArgument("'$ref' at " + Where(path) + " must point into this schema ('#...'), not '" + ref + "'");
  }
  const OJson* target = nullptr;
  try {
    const OJson::json_pointer pointer(ref.substr(1));
    if (root_.contains(pointer)) target = &root_.at(pointer);
  } catch (const std::exception&) {
  }
  if (target == nullptr) return InvalidArgument("'$ref' at " + Where(path) + " points at nothing: '" + ref + "'");
  const int32_t r = b_.Rule();
  refs_[ref] = r;
  TANDEM_ASSIGN_OR_RETURN(int32_t v, Value(*target, ref.substr(1), depth + 1));
  b_.Alternative(r, {v});
  return r;
}

StatusOr<std::shared_ptr<const Grammar>> Finish(GrammarBuilder& b, StatusOr<int32_t> root) {
  if (!root.ok()) return root.status();
  auto g = std::move(b).Build(*root);
  if (!g.ok()) return InvalidArgument("the schema cannot be generated: " + g.status().message());
  return g;
}

}  // namespace

StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(const OJson& schema) {
  GrammarBuilder b;
  SchemaCompiler c(schema, b);
  return Finish(b, c.Value(schema, "", 0));
}

StatusOr<std::shared_ptr<const Grammar>> CompileJsonObject() {
  const OJson empty = OJson::object();
  GrammarBuilder b;
  SchemaCompiler c(empty, b);
  return Finish(b, c.AnyObject());
}

// One to max_calls calls, each {"name": <one tool's name>, <key>: <arguments
// its parameters accept>} between call_prefix and call_suffix, the calls
// between open and close and apart by separator (one byte, or none for one call).
StatusOr<std::shared_ptr<const Grammar>> CompileToolCalls(const OJson& spec) {
  auto text = [&](const char* k) { return spec.contains(k) && spec[k].is_string() ? spec[k].get<std::string>() : ""; };
  if (!spec.is_object() || !spec.contains("tools") || !spec["tools"].is_array() || spec["tools"].empty() ||
      !spec.value("max_calls", OJson()).is_number_integer() || spec["max_calls"].get<int64_t>() < 1 ||
      spec["max_calls"].get<int64_t>() > 64) {
    return InvalidArgument("a tool-call constraint needs tools and max_calls in [1, 64]");
  }
  const int64_t max_calls = spec["max_calls"].get<int64_t>();
  const std::string key = text("key"), separator = text("separator");
  if (key.empty() || (max_calls > 1 && separator.size() != 1)) {
    return InvalidArgument("a tool-call constraint needs its arguments key and a one-byte separator");
  }
  GrammarBuilder b;
  std::vector<GrammarBuilder::Sequence> calls;
  for (const OJson& tool : spec["tools"]) {
    if (!tool.is_object() || !tool.value("name", OJson()).is_string() || !tool.contains("parameters")) {
      return InvalidArgument("a tool-call constraint's tools need a name and parameters");
    }
    const std::string name = tool["name"].get<std::string>();
    SchemaCompiler c(tool["parameters"], b);  // the parameters are their own root: their $refs resolve there
    StatusOr<int32_t> arguments = c.Value(tool["parameters"], "", 0);
    if (!arguments.ok()) return InvalidArgument("tool '" + name + "' parameters: " + arguments.status().message());
    GrammarBuilder::Sequence call;
    b.Literal(call, text("call_prefix") + "{\"name\":" + OJson(name).dump(-1, ' ', false, OJson::error_handler_t::replace) +
                        ",\"" + key + "\":");
    call.push_back(*arguments);
    b.Literal(call, "}" + text("call_suffix"));
    calls.push_back(std::move(call));
  }
  const OJson empty = OJson::object();
  SchemaCompiler c(empty, b);
  const int32_t one = c.Rule(std::move(calls));
  GrammarBuilder::Sequence all;
  b.Literal(all, text("open"));
  all.push_back(max_calls == 1 ? one : c.List(one, 1, max_calls, uint8_t(separator[0])));
  b.Literal(all, text("close"));
  return Finish(b, c.Rule({all}));
}

StatusOr<std::shared_ptr<const Grammar>> CompileConstraint(std::string_view constraint) {
  if (constraint == "json_object") return CompileJsonObject();
  for (std::string_view kind : {std::string_view("json_schema "), std::string_view("tool_calls ")}) {
    if (constraint.substr(0, kind.size()) != kind) continue;
    const OJson json = OJson::parse(constraint.substr(kind.size()), nullptr, false);
    if (json.is_discarded()) return InvalidArgument("the output constraint is not valid JSON");
    return kind == "tool_calls " ? CompileToolCalls(json) : CompileJsonSchema(json);
  }
  return InvalidArgument("unknown output constraint '" + std::string(constraint.substr(0, 32)) + "'");
}

}  // namespace tandem
