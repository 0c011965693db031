// The Jinja subset's renderer: statements write text, expressions evaluate
// to values with Jinja2's (Python's) semantics. Scopes follow Jinja2: a for
// loop's body has its own, so a plain `set` inside it does not leak out,
// while `set ns.x` changes the namespace wherever it was made.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <map>

#include "model/jinja_ast.h"

namespace tandem::jinja {

Value Value::Of(Json j) {
  Value v;
  // Depth, counted only as far as the limit (an iterative walk: data from a
  // request may be wide, never deeper than its own parser allowed).
  std::vector<std::pair<const Json*, int>> stack = {{&j, 0}};
  while (!stack.empty() && v.depth <= kMaxValueDepth) {
    auto [node, d] = stack.back();
    stack.pop_back();
    if (!node->is_structured()) continue;
    v.depth = std::max(v.depth, d + 1);
    for (const Json& child : *node) {
      if (child.is_structured()) stack.emplace_back(&child, d + 1);
    }
  }
  v.data = std::make_shared<Json>(std::move(j));
  return v;
}

const std::shared_ptr<Json>& Value::NullData() {
  static const std::shared_ptr<Json> null = std::make_shared<Json>();
  return null;
}

namespace {

constexpr int kMaxLoopIterations = 1 << 20;  // a template runs over a request's data: bounded all the same
constexpr size_t kMaxOutputBytes = size_t(64) << 20;
// Expressions evaluated and loop iterations run in one render: far above
// what any chat template needs for the largest request, far below what would
// hold a thread for long.
constexpr int64_t kMaxSteps = int64_t(1) << 22;
constexpr size_t kMaxBuiltBytes = size_t(1) << 30;

class Renderer {
 public:
  Renderer(const Json& context, const std::map<std::string, Template::Function>& functions) : functions_(functions) {
    scopes_.emplace_back();
    if (context.is_object()) {
      for (auto it = context.begin(); it != context.end(); ++it) scopes_.back()[it.key()] = Value::Of(it.value());
    }
  }

  Status Nodes(const std::vector<std::unique_ptr<Node>>& nodes, std::string* out) {
    for (const auto& n : nodes) {
      TANDEM_RETURN_IF_ERROR(One(*n, out));
      if (out->size() > kMaxOutputBytes) return LimitError(n->line, "the rendered text passes 64 MiB");
    }
    return Status::Ok();
  }

 private:
  Status One(const Node& n, std::string* out) {
    switch (n.kind) {
      case Node::Kind::kText: *out += n.text; return Status::Ok();
      case Node::Kind::kOutput: {
        TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*n.expr));
        *out += ToText(v);
        return Status::Ok();
      }
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches) {
          if (cond) {
            TANDEM_ASSIGN_OR_RETURN(Value c, Eval(*cond));
            if (!Truthy(c)) continue;
          }
          return Nodes(body, out);
        }
        return Status::Ok();
      case Node::Kind::kFor: return For(n, out);
      case Node::Kind::kSet: {
        TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*n.expr));
        return Assign(n, std::move(v));
      }
      case Node::Kind::kBlockSet: {
        std::string text;
        TANDEM_RETURN_IF_ERROR(Nodes(n.body, &text));
        return Assign(n, Value::Of(Json(text)));
      }
      case Node::Kind::kGeneration: return Nodes(n.body, out);
    }
    return Status::Ok();
  }

  Status Assign(const Node& n, Value v) {
    const std::string& name = n.targets[0];
    if (n.attribute.empty()) {
      scopes_.back()[name] = std::move(v);
      return Status::Ok();
    }
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
      auto it = s->find(name);
      if (it == s->end()) continue;
      if (!it->second.ns) return LineError(n.line, "'" + name + "' is not a namespace: cannot set '" + n.attribute + "'");
      if (v.depth + 1 > kMaxValueDepth) return LimitError(n.line, "a value nested more than 64 deep");
      const int depth = v.depth + 1;
      Json value = std::move(v).Take();
      v = Value();  // no longer shares the namespace's data (`set ns.a = ns.b`): it changes in place
      it->second.depth = std::max(it->second.depth, depth);
      it->second.Mutable()[n.attribute] = std::move(value);
      return Status::Ok();
    }
    return LineError(n.line, "'" + name + "' is undefined");
  }

  // The items a for loop walks: a list's items (sharing the list's data), a
  // mapping's keys, a string's characters.
  static StatusOr<std::vector<Value>> Items(const Value& v, int line) {
    std::vector<Value> items;
    if (v.undefined) return LineError(line, "cannot loop over an undefined value");
    if (v.j().is_array()) {
      if (v.j().size() > size_t(kMaxLoopIterations)) return LimitError(line, "a loop over more than 2^20 items");
      for (size_t i = 0; i < v.j().size(); ++i) items.push_back(Element(v, (*v.data)[i]));
    } else if (v.j().is_object()) {
      for (auto it = v.j().begin(); it != v.j().end(); ++it) items.push_back(Value::Of(it.key()));
    } else if (v.j().is_string()) {
      const std::string& s = v.j().get_ref<const std::string&>();
      for (size_t i = 0; i < s.size();) {  // one UTF-8 character each
        size_t len = 1;
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (c >= 0xf0) len = 4;
        else if (c >= 0xe0) len = 3;
        else if (c >= 0xc0) len = 2;
        items.push_back(Value::Of(s.substr(i, len)));
        i += len;
      }
    } else {
      return LineError(line, "cannot loop over " + PythonRepr(v.j()));
    }
    return items;
  }

  Status For(const Node& n, std::string* out) {
    TANDEM_ASSIGN_OR_RETURN(Value seq, Eval(*n.expr));
    TANDEM_ASSIGN_OR_RETURN(std::vector<Value> all, Items(seq, n.line));
    if (all.size() > size_t(kMaxLoopIterations)) return LimitError(n.line, "a loop over more than 2^20 items");
    scopes_.emplace_back();
    std::vector<Value> items;  // after the loop's `if` filter
    for (Value& item : all) {
      if (n.filter) {
        TANDEM_RETURN_IF_ERROR(Bind(n, item));
        auto keep = Eval(*n.filter);
        if (!keep.ok()) return scopes_.pop_back(), keep.status();
        if (!Truthy(*keep)) continue;
      }
      items.push_back(std::move(item));
    }
    Status st;
    for (size_t i = 0; i < items.size() && st.ok(); ++i) {
      if (++steps_ > kMaxSteps) {
        st = LimitError(n.line, "the template takes more than 2^22 steps");
        break;
      }
      st = Bind(n, items[i]);
      if (!st.ok()) break;
      Json loop = {{"index", i + 1}, {"index0", i}, {"first", i == 0}, {"last", i + 1 == items.size()},
                   {"length", items.size()}, {"revindex", items.size() - i}, {"revindex0", items.size() - i - 1}};
      loop["previtem"] = i > 0 ? items[i - 1].j() : Json();
      loop["nextitem"] = i + 1 < items.size() ? items[i + 1].j() : Json();
      scopes_.back()["loop"] = Value::Of(std::move(loop));
      st = Nodes(n.body, out);
    }
    scopes_.pop_back();
    TANDEM_RETURN_IF_ERROR(st);
    if (items.empty()) return Nodes(n.else_body, out);
    return Status::Ok();
  }

  // The loop variables of one item (`for k, v in pairs` unpacks).
  Status Bind(const Node& n, const Value& item) {
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = item;
      return Status::Ok();
    }
    if (!item.j().is_array() || item.j().size() != n.targets.size()) {
      return LineError(n.line, "cannot unpack " + PythonRepr(item.j()) + " into " + std::to_string(n.targets.size()) +
                                   " names");
    }
    for (size_t i = 0; i < n.targets.size(); ++i) scopes_.back()[n.targets[i]] = Element(item, (*item.data)[i]);
    return Status::Ok();
  }

  // A part of `whole` (a mapping's value, a list's item) that shares its
  // data rather than copying it; its depth is bounded by the whole's.
  static Value Element(const Value& whole, Json& part) {
    Value v;
    v.data = std::shared_ptr<Json>(whole.data, &part);
    v.depth = std::max(whole.depth - 1, 0);
    return v;
  }

  const Value* Lookup(const std::string& name) const {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
      auto it = s->find(name);
      if (it != s->end()) return &it->second;
    }
    return nullptr;
  }

  StatusOr<Value> Eval(const Expr& e) {
    if (++steps_ > kMaxSteps) return LimitError(e.line, "the template takes more than 2^22 steps");
    switch (e.kind) {
      case Expr::Kind::kLiteral: return Value::Of(e.literal);
      case Expr::Kind::kName: {
        const Value* v = Lookup(e.name);
        return v ? *v : Value::Undefined();
      }
      case Expr::Kind::kList: {
        Json list = Json::array();
        int depth = 0;
        for (const auto& a : e.args) {
          TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*a));
          depth = std::max(depth, v.depth);
          list.push_back(std::move(v).Take());
        }
        if (depth + 1 > kMaxValueDepth) return LimitError(e.line, "a value nested more than 64 deep");
        return Value::Of(std::move(list));
      }
      case Expr::Kind::kDict: {
        Json dict = Json::object();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          TANDEM_ASSIGN_OR_RETURN(Value k, Eval(*e.args[i]));
          TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1]));
          if (!k.j().is_string()) return LineError(e.line, "dict keys must be strings here");
          if (v.depth + 1 > kMaxValueDepth) return LimitError(e.line, "a value nested more than 64 deep");
          dict[k.j().get_ref<const std::string&>()] = std::move(v).Take();
        }
        return Value::Of(std::move(dict));
      }
      case Expr::Kind::kAttr: {
        TANDEM_ASSIGN_OR_RETURN(Value subject, Eval(*e.args[0]));
        return Attribute(subject, Value::Of(Json(e.name)), e.line);
      }
      case Expr::Kind::kIndex: {
        TANDEM_ASSIGN_OR_RETURN(Value subject, Eval(*e.args[0]));
        TANDEM_ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
        return Attribute(subject, key, e.line);
      }
      case Expr::Kind::kSlice: return Slice(e);
      case Expr::Kind::kCall: return Call(e);
      case Expr::Kind::kFilter: {
        std::vector<Value> args;
        std::vector<std::pair<std::string, Value>> kwargs;
        TANDEM_RETURN_IF_ERROR(Arguments(e, &args, &kwargs));
        const Value subject = args.front();
        args.erase(args.begin());
        return ApplyFilter(e.name, subject, args, kwargs, e.line);
      }
      case Expr::Kind::kTest: {
        if (e.name == "defined" || e.name == "undefined") {
          TANDEM_ASSIGN_OR_RETURN(Value subject, Eval(*e.args[0]));
          bool defined = !subject.undefined;
          if (!defined && e.args[0]->kind == Expr::Kind::kName) defined = IsFunction(e.args[0]->name);
          return Value::Of(Json((defined == (e.name == "defined")) != e.negated));
        }
        std::vector<Value> args;
        std::vector<std::pair<std::string, Value>> kwargs;
        TANDEM_RETURN_IF_ERROR(Arguments(e, &args, &kwargs));
        const Value subject = args.front();
        args.erase(args.begin());
        TANDEM_ASSIGN_OR_RETURN(bool r, ApplyTest(e.name, subject, args, e.line));
        return Value::Of(Json(r != e.negated));
      }
      case Expr::Kind::kUnary: return Unary(e);
      case Expr::Kind::kBinary: return Binary(e);
      case Expr::Kind::kTernary: {
        TANDEM_ASSIGN_OR_RETURN(Value cond, Eval(*e.args[1]));
        if (Truthy(cond)) return Eval(*e.args[0]);
        return e.args[2] ? Eval(*e.args[2]) : Value::Undefined();
      }
    }
    return LineError(e.line, "cannot evaluate this expression");
  }

  Status Arguments(const Expr& e, std::vector<Value>* args, std::vector<std::pair<std::string, Value>>* kwargs) {
    for (const auto& a : e.args) {
      TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*a));
      args->push_back(std::move(v));
    }
    for (const auto& [k, a] : e.kwargs) {
      TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*a));
      kwargs->emplace_back(k, std::move(v));
    }
    return Status::Ok();
  }

  // subject.name and subject[key]: a mapping's item, a list's or string's
  // element (negative from the end), or (for a name) a method bound later by Call.
  static StatusOr<Value> Attribute(const Value& subject, const Value& key, int line) {
    if (subject.undefined) return LineError(line, "'" + ToText(key) + "' of an undefined value");
    Json& j = *subject.data;
    if (j.is_object() && key.j().is_string()) {
      auto it = j.find(key.j().get_ref<const std::string&>());
      return it == j.end() ? Value::Undefined() : Element(subject, *it);
    }
    if ((j.is_array() || j.is_string()) && key.j().is_number_integer()) {
      const int64_t n = j.is_array() ? int64_t(j.size()) : int64_t(j.get_ref<const std::string&>().size());
      int64_t i = key.j().get<int64_t>();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::Undefined();
      if (j.is_array()) return Element(subject, j[size_t(i)]);
      return Value::Of(Json(std::string(1, j.get_ref<const std::string&>()[size_t(i)])));
    }
    return Value::Undefined();
  }

  StatusOr<Value> Slice(const Expr& e) {
    TANDEM_ASSIGN_OR_RETURN(Value subject, Eval(*e.args[0]));
    int64_t bounds[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; ++k) {
      if (!e.args[size_t(k) + 1]) continue;
      TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e.args[size_t(k) + 1]));
      if (v.j().is_null()) continue;
      if (!v.j().is_number_integer()) return LineError(e.line, "slice bounds must be integers");
      bounds[k] = v.j().get<int64_t>();
      given[k] = true;
    }
    const int64_t step = bounds[2];
    if (step == 0) return LineError(e.line, "slice step cannot be zero");
    const bool is_string = subject.j().is_string();
    if (!subject.j().is_array() && !is_string) return LineError(e.line, "cannot slice " + PythonRepr(subject.j()));
    const int64_t n = is_string ? int64_t(subject.j().get_ref<const std::string&>().size()) : int64_t(subject.j().size());
    auto clamp = [&](int64_t v, bool has, int64_t dflt) {  // Python's slice.indices
      if (!has) return dflt;
      if (v < 0) v += n;
      return step > 0 ? std::clamp<int64_t>(v, 0, n) : std::clamp<int64_t>(v, -1, n - 1);
    };
    const int64_t start = clamp(bounds[0], given[0], step > 0 ? 0 : n - 1);
    const int64_t stop = clamp(bounds[1], given[1], step > 0 ? n : -1);
    Json list = Json::array();
    std::string text;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (is_string) text += subject.j().get_ref<const std::string&>()[size_t(i)];
      else list.push_back(subject.j()[size_t(i)]);
    }
    return Value::Of(is_string ? Json(text) : list);
  }

  StatusOr<Value> Call(const Expr& e) {
    const Expr& callee = *e.args[0];
    std::vector<Value> args;
    std::vector<std::pair<std::string, Value>> kwargs;
    for (size_t i = 1; i < e.args.size(); ++i) {
      TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i]));
      args.push_back(std::move(v));
    }
    for (const auto& [k, a] : e.kwargs) {
      TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*a));
      kwargs.emplace_back(k, std::move(v));
    }
    if (callee.kind == Expr::Kind::kAttr) {  // a method: "x".strip(), d.items() ...
      TANDEM_ASSIGN_OR_RETURN(Value subject, Eval(*callee.args[0]));
      if (!kwargs.empty()) return LineError(e.line, "keyword arguments to ." + callee.name + "() are not supported");
      return CallMethod(subject, callee.name, args, e.line);
    }
    if (callee.kind != Expr::Kind::kName) return LineError(e.line, "only named functions and methods can be called");
    return CallFunction(callee.name, args, kwargs, e.line);
  }

  bool IsFunction(const std::string& name) const {
    return name == "raise_exception" || name == "namespace" || name == "dict" || name == "range" ||
           functions_.count(name) > 0;
  }

  StatusOr<Value> CallFunction(const std::string& name, const std::vector<Value>& args,
                               const std::vector<std::pair<std::string, Value>>& kwargs, int line) {
    if (name == "raise_exception") {
      return Status(StatusCode::kAborted, args.empty() ? std::string("raise_exception") : ToText(args[0]));
    }
    if (name == "namespace" || name == "dict") {
      Value v = !args.empty() && args[0].j().is_object() ? args[0] : Value::Of(Json::object());
      v.ns = name == "namespace";
      for (const auto& [k, a] : kwargs) {
        if (a.depth + 1 > kMaxValueDepth) return LimitError(line, "a value nested more than 64 deep");
        v.depth = std::max(v.depth, a.depth + 1);
        v.Mutable()[k] = a.j();
      }
      return v;
    }
    if (name == "range") {
      int64_t b[3] = {0, 0, 1};
      if (args.empty() || args.size() > 3) return LineError(line, "range() takes 1 to 3 arguments");
      for (const Value& a : args) {
        if (!a.j().is_number_integer()) return LineError(line, "range() takes integers");
      }
      if (args.size() == 1) b[1] = args[0].j().get<int64_t>();
      else for (size_t i = 0; i < args.size(); ++i) b[i] = args[i].j().get<int64_t>();
      if (b[2] == 0) return LineError(line, "range() step must not be zero");
      Json list = Json::array();
      for (int64_t i = b[0]; b[2] > 0 ? i < b[1] : i > b[1]; i += b[2]) {
        if (list.size() >= size_t(kMaxLoopIterations)) return LimitError(line, "range() of more than 2^20 items");
        list.push_back(i);
      }
      return Value::Of(std::move(list));
    }
    auto f = functions_.find(name);
    if (f == functions_.end()) return LineError(line, "'" + name + "' is not a function here");
    std::vector<Json> plain;
    for (const Value& a : args) plain.push_back(a.j());
    TANDEM_ASSIGN_OR_RETURN(Json r, f->second(plain));
    return Value::Of(std::move(r));
  }

  StatusOr<Value> Unary(const Expr& e) {
    TANDEM_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
    if (e.name == "not") return Value::Of(Json(!Truthy(a)));
    if (!a.j().is_number()) return LineError(e.line, "unary " + e.name + " of " + PythonRepr(a.j()));
    if (e.name == "+") return a;
    if (a.j().is_number_integer()) {
      int64_t r = 0;
      if (__builtin_sub_overflow(int64_t(0), a.j().get<int64_t>(), &r)) return LineError(e.line, "integer overflow");
      return Value::Of(Json(r));
    }
    return Value::Of(Json(-a.j().get<double>()));
  }

  StatusOr<Value> Binary(const Expr& e) {
    const std::string& op = e.name;
    TANDEM_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
    if (op == "and") return Truthy(a) ? Eval(*e.args[1]) : a;
    if (op == "or") return Truthy(a) ? a : Eval(*e.args[1]);
    TANDEM_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
    if (op == "==") return Value::Of(Json(Equal(a, b)));
    if (op == "!=") return Value::Of(Json(!Equal(a, b)));
    if (op == "~") {
      std::string text = ToText(a) + ToText(b);
      TANDEM_RETURN_IF_ERROR(Built(text.size(), e.line));
      return Value::Of(Json(std::move(text)));
    }
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.j().is_string() && a.j().is_string()) {
        found = b.j().get_ref<const std::string&>().find(a.j().get_ref<const std::string&>()) != std::string::npos;
      } else if (b.j().is_object() && a.j().is_string()) {
        found = b.j().contains(a.j().get_ref<const std::string&>());
      } else if (b.j().is_array()) {
        for (const Json& item : b.j()) found = found || Equal(a, Value::Of(item));
      } else if (!b.undefined) {
        return LineError(e.line, "'in' needs a string, list or mapping on its right");
      } else {
        return LineError(e.line, "'in' an undefined value");
      }
      return Value::Of(Json(found == (op == "in")));
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int cmp = 0;
      if (a.j().is_number() && b.j().is_number()) {
        const double x = a.j().get<double>(), y = b.j().get<double>();
        cmp = x < y ? -1 : x > y ? 1 : 0;
      } else if (a.j().is_string() && b.j().is_string()) {
        cmp = a.j().get_ref<const std::string&>().compare(b.j().get_ref<const std::string&>());
      } else {
        return LineError(e.line, "cannot compare " + PythonRepr(a.j()) + " with " + PythonRepr(b.j()));
      }
      const bool r = op == "<" ? cmp < 0 : op == ">" ? cmp > 0 : op == "<=" ? cmp <= 0 : cmp >= 0;
      return Value::Of(Json(r));
    }
    if (op == "+" && a.j().is_string() && b.j().is_string()) {
      std::string text = a.j().get_ref<const std::string&>() + b.j().get_ref<const std::string&>();
      TANDEM_RETURN_IF_ERROR(Built(text.size(), e.line));
      return Value::Of(Json(std::move(text)));
    }
    if (op == "+" && a.j().is_array() && b.j().is_array()) {
      Json list = a.j();
      for (const Json& item : b.j()) list.push_back(item);
      return Value::Of(std::move(list));
    }
    if (op == "*" && a.j().is_string() && b.j().is_number_integer()) {
      const std::string& unit = a.j().get_ref<const std::string&>();
      const int64_t times = std::clamp<int64_t>(b.j().get<int64_t>(), 0, 1 << 16);
      if (unit.size() * size_t(times) > kMaxOutputBytes) return LimitError(e.line, "a string of more than 64 MiB");
      TANDEM_RETURN_IF_ERROR(Built(unit.size() * size_t(times), e.line));
      std::string out;
      for (int64_t i = 0; i < times; ++i) out += unit;
      return Value::Of(Json(out));
    }
    if (!a.j().is_number() || !b.j().is_number()) {
      return LineError(e.line, "'" + op + "' of " + PythonRepr(a.j()) + " and " + PythonRepr(b.j()));
    }
    const bool ints = a.j().is_number_integer() && b.j().is_number_integer();
    if (ints && op != "/" && op != "**") {
      const int64_t x = a.j().get<int64_t>(), y = b.j().get<int64_t>();
      if ((op == "//" || op == "%") && y == 0) return LineError(e.line, "division by zero");
      int64_t r = 0;
      const bool overflow = op == "+" ? __builtin_add_overflow(x, y, &r)
                            : op == "-" ? __builtin_sub_overflow(x, y, &r)
                            : op == "*" ? __builtin_mul_overflow(x, y, &r)
                                        : x == INT64_MIN && y == -1;
      if (overflow) return LineError(e.line, "integer overflow");
      if (op == "+" || op == "-" || op == "*") return Value::Of(Json(r));
      const int64_t q = x / y - ((x % y != 0) && ((x < 0) != (y < 0)));  // Python floors
      if (op == "//") return Value::Of(Json(q));
      return Value::Of(Json(x - q * y));
    }
    const double x = a.j().get<double>(), y = b.j().get<double>();
    if ((op == "/" || op == "//" || op == "%") && y == 0) return LineError(e.line, "division by zero");
    if (op == "+") return Value::Of(Json(x + y));
    if (op == "-") return Value::Of(Json(x - y));
    if (op == "*") return Value::Of(Json(x * y));
    if (op == "/") return Value::Of(Json(x / y));
    if (op == "//") return Value::Of(Json(std::floor(x / y)));
    if (op == "%") return Value::Of(Json(x - std::floor(x / y) * y));
    if (op == "**") {
      if (ints && b.j().get<int64_t>() >= 0) {
        int64_t r = 1;
        for (int64_t i = 0; i < std::min<int64_t>(b.j().get<int64_t>(), 64); ++i) {
          if (__builtin_mul_overflow(r, a.j().get<int64_t>(), &r)) return LineError(e.line, "integer overflow");
        }
        return Value::Of(Json(r));
      }
      return Value::Of(Json(std::pow(x, y)));
    }
    return LineError(e.line, "unknown operator " + op);
  }

  // Text built by + ~ and *: each builds a new string, so a template that
  // grows one string a piece at a time does quadratic work; this bounds it.
  Status Built(size_t bytes, int line) {
    built_ += bytes;
    return built_ > kMaxBuiltBytes ? LimitError(line, "the template builds more than 1 GiB of text") : Status::Ok();
  }

  const std::map<std::string, Template::Function>& functions_;
  std::vector<std::map<std::string, Value>> scopes_;
  int64_t steps_ = 0;
  size_t built_ = 0;
};

}  // namespace

Template::Template() = default;
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

StatusOr<Template> Template::Parse(std::string_view source) {
  // Jinja2 drops one newline at the end of the source (keep_trailing_newline off).
  if (source.size() >= 2 && source.substr(source.size() - 2) == "\r\n") source.remove_suffix(2);
  else if (!source.empty() && source.back() == '\n') source.remove_suffix(1);
  Template t;
  TANDEM_ASSIGN_OR_RETURN(t.nodes_, ParseTemplate(source));
  return t;
}

StatusOr<std::string> Template::Render(const Json& context, const std::map<std::string, Function>& functions) const {
  try {
    Renderer r(context, functions);
    std::string out;
    TANDEM_RETURN_IF_ERROR(r.Nodes(nodes_, &out));
    return out;
  } catch (const std::exception& e) {  // a library's error (allocation, a JSON type) ends this render only
    return InvalidArgument(std::string("the template failed: ") + e.what());
  }
}

}  // namespace tandem::jinja
