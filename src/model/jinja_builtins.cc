// The Jinja subset's built-ins with Python's semantics: str() and repr()
// (floats in Python's shortest repr), json.dumps for `tojson`, truthiness
// and equality, and the filters, tests and string/dict methods that chat
// templates use. An unknown filter, test or method is an error naming it.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "model/jinja_ast.h"

namespace tandem::jinja {
namespace {

// Python's repr(float): the shortest digits that round-trip, fixed notation
// for exponents in [-4, 16), else d.ddde+XX.
std::string PythonFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // "-1.2345e+02"
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::atoi(sci.c_str() + e + 1);
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) if (c != '.') digits += c;
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      if (int(digits.size()) <= exp + 1) {
        out = digits + std::string(size_t(exp + 1 - int(digits.size())), '0') + ".0";
      } else {
        out = digits.substr(0, size_t(exp + 1)) + "." + digits.substr(size_t(exp + 1));
      }
    } else {
      out = "0." + std::string(size_t(-exp - 1), '0') + digits;
    }
  } else {
    out = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "");
    char ex[16];
    std::snprintf(ex, sizeof(ex), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += ex;
  }
  return neg ? "-" + out : out;
}

std::string PythonStringRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == quote) out += std::string("\\") + char(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    } else {
      out += char(c);
    }
  }
  return out + quote;
}

void JsonString(const std::string& s, std::string* out) {
  *out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "\\u%04x", c);
          *out += hex;
        } else {
          *out += char(c);
        }
    }
  }
  *out += '"';
}

void Dump(const Json& j, int indent, bool sort_keys, const std::string& item_sep, const std::string& key_sep,
          int depth, std::string* out) {
  const std::string nl = indent >= 0 ? "\n" + std::string(size_t(indent) * size_t(depth + 1), ' ') : "";
  const std::string close_nl = indent >= 0 ? "\n" + std::string(size_t(indent) * size_t(depth), ' ') : "";
  if (j.is_object()) {
    if (j.empty()) return void(*out += "{}");
    std::vector<std::string> keys;
    for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
    if (sort_keys) std::sort(keys.begin(), keys.end());
    *out += "{";
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i > 0) *out += item_sep;
      *out += nl;
      JsonString(keys[i], out);
      *out += key_sep;
      Dump(j.at(keys[i]), indent, sort_keys, item_sep, key_sep, depth + 1, out);
    }
    *out += close_nl + "}";
  } else if (j.is_array()) {
    if (j.empty()) return void(*out += "[]");
    *out += "[";
    for (size_t i = 0; i < j.size(); ++i) {
      if (i > 0) *out += item_sep;
      *out += nl;
      Dump(j[i], indent, sort_keys, item_sep, key_sep, depth + 1, out);
    }
    *out += close_nl + "]";
  } else if (j.is_string()) {
    JsonString(j.get_ref<const std::string&>(), out);
  } else if (j.is_number_float()) {
    const double d = j.get<double>();
    *out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : PythonFloat(d);
  } else if (j.is_boolean()) {
    *out += j.get<bool>() ? "true" : "false";
  } else if (j.is_null()) {
    *out += "null";
  } else {
    *out += j.dump();  // integers
  }
}

size_t Utf8Length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

std::string Strip(const std::string& s, const std::string& chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) while (b < e && chars.find(s[b]) != std::string::npos) ++b;
  if (right) while (e > b && chars.find(s[e - 1]) != std::string::npos) --e;
  return s.substr(b, e - b);
}

const std::string kWhitespace = " \t\n\r\f\v";

std::string Capitalize(std::string s, bool every_word) {
  bool start = true;
  for (char& c : s) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c));
    if (alpha) c = char(start ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
    start = every_word ? !alpha : false;
  }
  return s;
}

const Value* Kwarg(const std::vector<std::pair<std::string, Value>>& kwargs, const char* name) {
  for (const auto& [k, v] : kwargs) {
    if (k == name) return &v;
  }
  return nullptr;
}

// A positional argument, or the keyword one, or nullptr.
const Value* Arg(const std::vector<Value>& args, size_t i, const std::vector<std::pair<std::string, Value>>& kwargs,
                 const char* name) {
  return i < args.size() ? &args[i] : Kwarg(kwargs, name);
}

StatusOr<Json> Items(const Value& v, int line) {
  if (v.undefined) return LineError(line, "items of an undefined value");
  if (v.j().is_array()) return v.j();
  if (v.j().is_object()) {
    Json keys = Json::array();
    for (auto it = v.j().begin(); it != v.j().end(); ++it) keys.push_back(it.key());
    return keys;
  }
  return LineError(line, PythonRepr(v.j()) + " is not iterable");
}

// selectattr / rejectattr: items whose attribute passes the test (truthiness without one).
StatusOr<Value> SelectAttr(const Value& subject, const std::vector<Value>& args, bool keep, int line) {
  if (args.empty() || !args[0].j().is_string()) return LineError(line, "selectattr needs an attribute name");
  TANDEM_ASSIGN_OR_RETURN(Json items, Items(subject, line));
  Json out = Json::array();
  for (const Json& item : items) {
    Value attr = item.is_object() && item.contains(args[0].j().get_ref<const std::string&>())
                     ? Value::Of(item[args[0].j().get_ref<const std::string&>()])
                     : Value::Undefined();
    bool pass = false;
    if (args.size() == 1) {
      pass = Truthy(attr);
    } else {
      if (!args[1].j().is_string()) return LineError(line, "selectattr's test must be named by a string");
      TANDEM_ASSIGN_OR_RETURN(pass, ApplyTest(args[1].j().get_ref<const std::string&>(), attr,
                                              std::vector<Value>(args.begin() + 2, args.end()), line));
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::Of(std::move(out));
}

}  // namespace

bool Truthy(const Value& v) {
  if (v.undefined) return false;
  const Json& j = v.j();
  if (j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>() != 0;
  if (j.is_number_float()) return j.get<double>() != 0.0;
  if (j.is_string()) return !j.get_ref<const std::string&>().empty();  // (json::empty() is false for any string)
  if (j.is_array() || j.is_object()) return !j.empty();
  return true;
}

std::string PythonRepr(const Json& j) {
  if (j.is_string()) return PythonStringRepr(j.get_ref<const std::string&>());
  if (j.is_null()) return "None";
  if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
  if (j.is_number_float()) return PythonFloat(j.get<double>());
  if (j.is_number()) return j.dump();
  std::string out;
  if (j.is_array()) {
    out = "[";
    for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + PythonRepr(j[i]);
    return out + "]";
  }
  out = "{";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    out += (first ? "" : ", ") + PythonStringRepr(it.key()) + ": " + PythonRepr(it.value());
    first = false;
  }
  return out + "}";
}

std::string ToText(const Value& v) {
  if (v.undefined) return "";
  if (v.j().is_string()) return v.j().get_ref<const std::string&>();
  return PythonRepr(v.j());
}

bool Equal(const Value& a, const Value& b) {
  if (a.undefined || b.undefined) return a.undefined && b.undefined;
  if (a.j().is_number() && b.j().is_number()) return a.j().get<double>() == b.j().get<double>();
  if (a.j().is_boolean() && b.j().is_number()) return double(a.j().get<bool>()) == b.j().get<double>();
  if (b.j().is_boolean() && a.j().is_number()) return double(b.j().get<bool>()) == a.j().get<double>();
  return a.j() == b.j();
}

std::string DumpJson(const Json& value, int indent, bool sort_keys, const std::string* item_sep,
                     const std::string* key_sep) {
  std::string out;
  Dump(value, indent, sort_keys, item_sep ? *item_sep : (indent >= 0 ? "," : ", "), key_sep ? *key_sep : ": ", 0,
       &out);
  return out;
}

StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, const std::vector<Value>& args,
                            const std::vector<std::pair<std::string, Value>>& kwargs, int line) {
  const Json& j = v.j();
  auto need_string = [&]() -> Status {
    return j.is_string() ? Status::Ok() : LineError(line, "filter '" + name + "' needs a string, not " + PythonRepr(j));
  };
  if (name == "tojson") {
    const Value* indent = Arg(args, 0, kwargs, "indent");
    const Value* sort = Kwarg(kwargs, "sort_keys");
    std::string item_sep, key_sep;
    const Value* seps = Kwarg(kwargs, "separators");
    if (seps && seps->j().is_array() && seps->j().size() == 2 && seps->j()[0].is_string() &&
        seps->j()[1].is_string()) {
      item_sep = seps->j()[0].get_ref<const std::string&>();
      key_sep = seps->j()[1].get_ref<const std::string&>();
    } else if (seps && !seps->j().is_null()) {
      return LineError(line, "tojson's separators must be two strings");
    }
    const int64_t n = indent && indent->j().is_number_integer() ? indent->j().get<int64_t>() : -1;
    if (n > 16) return LineError(line, "tojson's indent is at most 16 here");
    return Value::Of(Json(DumpJson(v.undefined ? Json() : j, int(n), sort && Truthy(*sort), seps ? &item_sep : nullptr,
                                   seps ? &key_sep : nullptr)));
  }
  // Jinja2's string filters take str() of anything they get.
  if (name == "trim" || name == "strip") return Value::Of(Json(Strip(ToText(v), kWhitespace, true, true)));
  if (name == "length" || name == "count") {
    if (j.is_string()) return Value::Of(Json(int64_t(Utf8Length(j.get_ref<const std::string&>()))));
    if (j.is_array() || j.is_object()) return Value::Of(Json(int64_t(j.size())));
    return LineError(line, "length of " + (v.undefined ? std::string("an undefined value") : PythonRepr(j)));
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    std::string s = ToText(v);
    if (name == "upper") for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
    if (name == "lower") for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (name == "capitalize") s = Capitalize(s, false);
    if (name == "title") s = Capitalize(s, true);
    return Value::Of(Json(s));
  }
  if (name == "default" || name == "d") {
    const Value* dflt = Arg(args, 0, kwargs, "default_value");
    const Value* boolean = Arg(args, 1, kwargs, "boolean");
    const bool use = v.undefined || (boolean && Truthy(*boolean) && !Truthy(v));
    return use ? (dflt ? *dflt : Value::Of(Json(""))) : v;
  }
  if (name == "join") {
    const Value* sep = Arg(args, 0, kwargs, "d");
    const Value* attr = Arg(args, 1, kwargs, "attribute");
    TANDEM_ASSIGN_OR_RETURN(Json items, Items(v, line));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0 && sep) out += ToText(*sep);
      Value item = Value::Of(items[i]);
      if (attr && items[i].is_object()) item = items[i].contains(ToText(*attr)) ? Value::Of(items[i][ToText(*attr)]) : Value::Undefined();
      out += ToText(item);
    }
    return Value::Of(Json(out));
  }
  if (name == "first" || name == "last") {
    if (j.is_array()) {  // `messages | last` inside a loop over messages: no copy of the list
      if (j.empty()) return Value::Undefined();
      return Value::Of(name == "first" ? j.front() : j.back());
    }
    TANDEM_ASSIGN_OR_RETURN(Json items, Items(v, line));
    if (items.empty()) return Value::Undefined();
    return Value::Of(name == "first" ? items.front() : items.back());
  }
  if (name == "list") {
    if (j.is_string()) {
      Json out = Json::array();
      for (char c : j.get_ref<const std::string&>()) out.push_back(std::string(1, c));
      return Value::Of(std::move(out));
    }
    TANDEM_ASSIGN_OR_RETURN(Json items, Items(v, line));
    return Value::Of(std::move(items));
  }
  if (name == "reverse") {
    if (j.is_string()) {
      std::string s = j.get_ref<const std::string&>();
      std::reverse(s.begin(), s.end());
      return Value::Of(Json(s));
    }
    TANDEM_ASSIGN_OR_RETURN(Json items, Items(v, line));
    std::reverse(items.begin(), items.end());
    return Value::Of(std::move(items));
  }
  if (name == "string") return Value::Of(Json(ToText(v)));
  if (name == "safe" || name == "e" || name == "escape") {
    if (name == "safe") return v;
    std::string out;
    for (char c : ToText(v)) {
      if (c == '&') out += "&amp;";
      else if (c == '<') out += "&lt;";
      else if (c == '>') out += "&gt;";
      else if (c == '"') out += "&#34;";
      else if (c == '\'') out += "&#39;";
      else out += c;
    }
    return Value::Of(Json(out));
  }
  if (name == "int") {
    if (j.is_number()) return Value::Of(Json(int64_t(j.get<double>())));
    if (j.is_string()) return Value::Of(Json(int64_t(std::strtoll(j.get_ref<const std::string&>().c_str(), nullptr, 10))));
    return Value::Of(Json(int64_t(0)));
  }
  if (name == "float") {
    if (j.is_number()) return Value::Of(Json(j.get<double>()));
    if (j.is_string()) return Value::Of(Json(std::strtod(j.get_ref<const std::string&>().c_str(), nullptr)));
    return Value::Of(Json(0.0));
  }
  if (name == "abs" && j.is_number()) {
    return Value::Of(j.is_number_integer() ? Json(std::abs(j.get<int64_t>())) : Json(std::fabs(j.get<double>())));
  }
  if (name == "items") {
    if (!j.is_object()) return LineError(line, "items of " + PythonRepr(j));
    Json out = Json::array();
    for (auto it = j.begin(); it != j.end(); ++it) out.push_back(Json::array({it.key(), it.value()}));
    return Value::Of(std::move(out));
  }
  if (name == "dictsort") {
    if (!j.is_object()) return LineError(line, "dictsort of " + PythonRepr(j));
    Json out = Json::array();
    std::vector<std::string> keys;
    for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
    std::sort(keys.begin(), keys.end());
    for (const std::string& k : keys) out.push_back(Json::array({k, j.at(k)}));
    return Value::Of(std::move(out));
  }
  if (name == "replace") {
    TANDEM_RETURN_IF_ERROR(need_string());
    return CallMethod(v, "replace", args, line);
  }
  if (name == "selectattr" || name == "rejectattr") return SelectAttr(v, args, name == "selectattr", line);
  if (name == "map") {
    const Value* attr = Kwarg(kwargs, "attribute");
    TANDEM_ASSIGN_OR_RETURN(Json items, Items(v, line));
    Json out = Json::array();
    for (const Json& item : items) {
      if (attr) {
        const std::string key = ToText(*attr);
        out.push_back(item.is_object() && item.contains(key) ? item[key] : Json());
      } else {
        if (args.empty() || !args[0].j().is_string()) return LineError(line, "map needs attribute= or a filter name");
        TANDEM_ASSIGN_OR_RETURN(Value r, ApplyFilter(args[0].j().get_ref<const std::string&>(), Value::Of(item),
                                                     std::vector<Value>(args.begin() + 1, args.end()), {}, line));
        out.push_back(r.j());
      }
    }
    return Value::Of(std::move(out));
  }
  if (name == "unique") {
    TANDEM_ASSIGN_OR_RETURN(Json items, Items(v, line));
    Json out = Json::array();
    for (const Json& item : items) {
      if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
    }
    return Value::Of(std::move(out));
  }
  if (name == "indent") {
    TANDEM_RETURN_IF_ERROR(need_string());
    const Value* width = Arg(args, 0, kwargs, "width");
    const Value* first = Arg(args, 1, kwargs, "first");
    const int64_t n = width && width->j().is_number_integer() ? width->j().get<int64_t>() : 4;
    if (n < 0 || n > 256) return LineError(line, "indent's width must be 0..256 here");
    const std::string pad(size_t(n), ' ');
    std::string out;
    const std::string s = j.get_ref<const std::string&>();
    for (size_t i = 0; i < s.size(); ++i) {
      out += s[i];
      if (s[i] == '\n' && i + 1 < s.size() && s[i + 1] != '\n') out += pad;
    }
    return Value::Of(Json((first && Truthy(*first) ? pad : "") + out));
  }
  return LineError(line, "filter '" + name + "' is not supported by this Jinja subset");
}

StatusOr<bool> ApplyTest(const std::string& name, const Value& v, const std::vector<Value>& args, int line) {
  const Json& j = v.j();
  if (name == "none") return !v.undefined && j.is_null();
  if (name == "string") return !v.undefined && j.is_string();
  if (name == "number") return !v.undefined && j.is_number();
  if (name == "integer") return !v.undefined && j.is_number_integer();
  if (name == "float") return !v.undefined && j.is_number_float();
  if (name == "boolean") return !v.undefined && j.is_boolean();
  if (name == "true") return !v.undefined && j.is_boolean() && j.get<bool>();
  if (name == "false") return !v.undefined && j.is_boolean() && !j.get<bool>();
  if (name == "mapping") return !v.undefined && j.is_object();
  if (name == "sequence" || name == "iterable") return !v.undefined && (j.is_array() || j.is_string() || j.is_object());
  if (name == "callable") return false;
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!j.is_number_integer()) return LineError(line, "test '" + name + "' needs an integer");
    const int64_t x = j.get<int64_t>();
    if (name == "odd") return x % 2 != 0;
    if (name == "even") return x % 2 == 0;
    if (args.empty() || !args[0].j().is_number_integer() || args[0].j().get<int64_t>() == 0) {
      return LineError(line, "divisibleby needs a non-zero integer");
    }
    return x % args[0].j().get<int64_t>() == 0;
  }
  if (args.empty()) return LineError(line, "test '" + name + "' is not supported by this Jinja subset");
  const Value& other = args[0];
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return Equal(v, other);
  if (name == "ne" || name == "!=") return !Equal(v, other);
  if (name == "in") {
    if (other.j().is_array()) return std::any_of(other.j().begin(), other.j().end(), [&](const Json& x) { return Equal(v, Value::Of(x)); });
    if (other.j().is_string() && j.is_string()) return other.j().get_ref<const std::string&>().find(j.get_ref<const std::string&>()) != std::string::npos;
    if (other.j().is_object() && j.is_string()) return other.j().contains(j.get_ref<const std::string&>());
    return false;
  }
  if ((name == "lt" || name == "gt" || name == "le" || name == "ge") && j.is_number() && other.j().is_number()) {
    const double x = j.get<double>(), y = other.j().get<double>();
    return name == "lt" ? x < y : name == "gt" ? x > y : name == "le" ? x <= y : x >= y;
  }
  return LineError(line, "test '" + name + "' is not supported by this Jinja subset");
}

StatusOr<Value> CallMethod(const Value& v, const std::string& method, const std::vector<Value>& args, int line) {
  const Json& j = v.j();
  if (v.undefined) return LineError(line, "." + method + "() of an undefined value");
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    auto str_arg = [&](size_t i) { return i < args.size() && args[i].j().is_string() ? args[i].j().get_ref<const std::string&>() : std::string(); };
    if (method == "strip" || method == "lstrip" || method == "rstrip") {
      const std::string chars = args.empty() || args[0].j().is_null() ? kWhitespace : str_arg(0);
      return Value::Of(Json(Strip(s, chars, method != "rstrip", method != "lstrip")));
    }
    if (method == "startswith" || method == "endswith") {
      std::vector<std::string> candidates;
      if (!args.empty() && args[0].j().is_array()) {
        for (const Json& c : args[0].j()) if (c.is_string()) candidates.push_back(c.get_ref<const std::string&>());
      } else {
        candidates.push_back(str_arg(0));
      }
      for (const std::string& c : candidates) {
        const bool hit = method == "startswith" ? s.rfind(c, 0) == 0
                                                : s.size() >= c.size() && s.compare(s.size() - c.size(), c.size(), c) == 0;
        if (hit) return Value::Of(Json(true));
      }
      return Value::Of(Json(false));
    }
    if (method == "upper" || method == "lower" || method == "title" || method == "capitalize") {
      return ApplyFilter(method, v, {}, {}, line);
    }
    if (method == "replace") {
      const std::string from = str_arg(0), to = str_arg(1);
      int64_t count = args.size() > 2 && args[2].j().is_number_integer() ? args[2].j().get<int64_t>() : -1;
      if (from.empty()) return LineError(line, "replace() of an empty string is not supported");
      std::string out;
      size_t pos = 0;
      for (size_t at; count != 0 && (at = s.find(from, pos)) != std::string::npos; --count) {
        out += s.substr(pos, at - pos) + to;
        pos = at + from.size();
      }
      return Value::Of(Json(out + s.substr(pos)));
    }
    if (method == "split") {
      Json out = Json::array();
      const std::string sep = str_arg(0);
      if (sep.empty()) {  // runs of whitespace
        size_t i = 0;
        while (i < s.size()) {
          while (i < s.size() && kWhitespace.find(s[i]) != std::string::npos) ++i;
          size_t k = i;
          while (k < s.size() && kWhitespace.find(s[k]) == std::string::npos) ++k;
          if (k > i) out.push_back(s.substr(i, k - i));
          i = k;
        }
      } else {
        size_t pos = 0;
        for (size_t at; (at = s.find(sep, pos)) != std::string::npos; pos = at + sep.size()) out.push_back(s.substr(pos, at - pos));
        out.push_back(s.substr(pos));
      }
      return Value::Of(std::move(out));
    }
    if (method == "find") {
      const size_t at = s.find(str_arg(0));
      return Value::Of(Json(at == std::string::npos ? int64_t(-1) : int64_t(at)));
    }
    if (method == "join") {
      if (args.empty()) return LineError(line, "join() needs a list");
      TANDEM_ASSIGN_OR_RETURN(Json items, Items(args[0], line));
      std::string out;
      for (size_t i = 0; i < items.size(); ++i) out += (i ? s : "") + ToText(Value::Of(items[i]));
      return Value::Of(Json(out));
    }
  } else if (j.is_object()) {
    if (method == "items") return ApplyFilter("items", v, {}, {}, line);
    if (method == "keys" || method == "values") {
      Json out = Json::array();
      for (auto it = j.begin(); it != j.end(); ++it) out.push_back(method == "keys" ? Json(it.key()) : it.value());
      return Value::Of(std::move(out));
    }
    if (method == "get") {
      if (args.empty() || !args[0].j().is_string()) return LineError(line, "get() needs a string key");
      auto it = j.find(args[0].j().get_ref<const std::string&>());
      if (it != j.end()) return Value::Of(*it);
      return args.size() > 1 ? args[1] : Value::Of(Json());
    }
  }
  return LineError(line, "method ." + method + "() of " + PythonRepr(j) + " is not supported by this Jinja subset");
}

}  // namespace tandem::jinja
