// The Jinja subset's syntax tree and values (model/jinja.h); private to
// jinja_*.cc.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/jinja.h"

namespace tandem::jinja {

// A value while rendering: JSON data, Jinja's undefined, or a namespace()
// (a mapping whose attributes `set` may change). The data is shared, never
// changed in place while shared: reading a name or passing a value on costs a
// reference count, not a copy of what it holds (a template that reads a long
// `messages` once per message stays linear).
struct Value {
  Value() : data(NullData()) {}
  Value(const Value&) = default;
  Value& operator=(const Value&) = default;
  // A moved-from value is null data, never a null pointer.
  Value(Value&& other) noexcept
      : data(std::exchange(other.data, NullData())), undefined(other.undefined), ns(other.ns), depth(other.depth) {}
  Value& operator=(Value&& other) noexcept {
    data = std::exchange(other.data, NullData());
    undefined = other.undefined;
    ns = other.ns;
    depth = other.depth;
    return *this;
  }
  const Json& j() const { return *data; }
  // The data to change: this value's own copy from now on.
  Json& Mutable() {
    if (data.use_count() > 1) data = std::make_shared<Json>(*data);
    return *data;
  }
  // The data, moved out when nothing else shares it.
  Json Take() && { return data.use_count() == 1 ? std::move(*data) : Json(*data); }

  std::shared_ptr<Json> data;  // never null
  bool undefined = false;
  bool ns = false;
  int depth = 0;  // nesting of lists and mappings, counted up to kMaxValueDepth + 1

  static Value Undefined() {
    Value v;
    v.undefined = true;
    return v;
  }
  static Value Of(Json j);

 private:
  static const std::shared_ptr<Json>& NullData();
};

// Deeper values are refused: copying or printing them recurses.
inline constexpr int kMaxValueDepth = 64;

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind { kLiteral, kName, kList, kDict, kAttr, kIndex, kSlice, kCall, kFilter, kTest, kUnary, kBinary, kTernary };
  Kind kind = Kind::kLiteral;
  int line = 0;
  Json literal;                 // kLiteral
  std::string name;             // kName; kAttr: attribute; kFilter/kTest: its name; kUnary/kBinary: the operator
  std::vector<ExprPtr> args;    // operands, items (dict: key, value, key, value ...), call/filter/test arguments
                                // (a filter's or test's subject first; a call's callee first); kSlice: subject,
                                // start, stop, step (null where absent); kTernary: then, condition, else (may be null)
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // calls and filters
  bool negated = false;         // kTest: `is not`
};

struct Node {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kBlockSet, kGeneration };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;                        // kText
  ExprPtr expr;                            // kOutput; kFor: the iterable; kSet: the value
  std::vector<std::pair<ExprPtr, std::vector<std::unique_ptr<Node>>>> branches;  // kIf: (condition or null, body)
  std::vector<std::string> targets;        // kFor: loop variables; kSet/kBlockSet: the name
  std::string attribute;                   // kSet: `set ns.attribute = ...`
  ExprPtr filter;                          // kFor: `for x in xs if cond`
  std::vector<std::unique_ptr<Node>> body, else_body;  // kFor, kBlockSet, kGeneration
};

// Source -> statements (jinja_parse.cc).
StatusOr<std::vector<std::unique_ptr<Node>>> ParseTemplate(std::string_view source);

// The built-in filters, tests and methods (jinja_builtins.cc).
StatusOr<Value> ApplyFilter(const std::string& name, const Value& subject, const std::vector<Value>& args,
                            const std::vector<std::pair<std::string, Value>>& kwargs, int line);
StatusOr<bool> ApplyTest(const std::string& name, const Value& subject, const std::vector<Value>& args, int line);
StatusOr<Value> CallMethod(const Value& subject, const std::string& method, const std::vector<Value>& args, int line);

// Python semantics the evaluator shares with the built-ins.
bool Truthy(const Value& v);
std::string ToText(const Value& v);        // str(): what {{ }} prints
std::string PythonRepr(const Json& j);     // repr() of data
bool Equal(const Value& a, const Value& b);
Status LineError(int line, const std::string& what);
// A render past one of its bounds (steps, text, loop length, nesting): what
// the data asked for, not a fault of the template (ResourceExhausted).
Status LimitError(int line, const std::string& what);

}  // namespace tandem::jinja
