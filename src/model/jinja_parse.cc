// The Jinja subset's lexer and parser: source -> segments (text, {{ }},
// {% %}) with Jinja2's whitespace rules (trim_blocks, lstrip_blocks, the -
// markers), then segments -> statements, and tag contents -> expressions by
// recursive descent in Jinja2's precedence order.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "model/jinja_ast.h"

namespace tandem::jinja {

Status LineError(int line, const std::string& what) {
  return InvalidArgument("chat template line " + std::to_string(line) + ": " + what);
}

Status LimitError(int line, const std::string& what) {
  return ResourceExhausted("chat template line " + std::to_string(line) + ": " + what);
}

namespace {

struct Segment {
  enum class Kind { kText, kOutput, kBlock };
  Kind kind;
  std::string text;
  int line;
};

int LinesIn(std::string_view s) { return int(std::count(s.begin(), s.end(), '\n')); }

// The end of a tag whose content starts at `from`, skipping quoted strings.
size_t FindTagEnd(std::string_view src, size_t from, std::string_view close) {
  char quote = 0;
  for (size_t i = from; i < src.size(); ++i) {
    const char c = src[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (src.compare(i, close.size(), close) == 0) {
      return i;
    }
  }
  return std::string_view::npos;
}

// Jinja2's lexer rules with trim_blocks and lstrip_blocks: a block or
// comment tag takes the newline right after it; one with only spaces and
// tabs before it on its line takes those too (unless written {%+); a '-'
// inside a delimiter strips all whitespace on that side.
StatusOr<std::vector<Segment>> Lex(std::string_view src) {
  std::vector<Segment> out;
  std::string text;
  int line = 1;
  size_t pos = 0;
  bool strip_next = false, trim_newline = false;
  bool line_starting = true;  // the previous tag (or the template's start) ended a line
  for (;;) {
    size_t open = src.find('{', pos);
    while (open != std::string_view::npos &&
           (open + 1 >= src.size() || (src[open + 1] != '{' && src[open + 1] != '%' && src[open + 1] != '#'))) {
      open = src.find('{', open + 1);
    }
    const std::string_view chunk = src.substr(pos, open == std::string_view::npos ? std::string_view::npos : open - pos);
    std::string piece(chunk);
    if (trim_newline && !piece.empty() && piece[0] == '\n') {
      piece.erase(0, 1);
      line_starting = true;
    }
    if (strip_next) {
      const size_t keep = piece.find_first_not_of(" \t\r\n");
      const size_t cut = keep == std::string::npos ? piece.size() : keep;
      if (cut > 0) line_starting = piece[cut - 1] == '\n';
      piece.erase(0, cut);
    }
    trim_newline = strip_next = false;
    line += LinesIn(chunk);
    if (open == std::string_view::npos) {
      text += piece;
      if (!text.empty()) out.push_back({Segment::Kind::kText, std::move(text), line});
      return out;
    }
    const char type = src[open + 1];
    const bool minus = open + 2 < src.size() && src[open + 2] == '-';
    const bool plus = open + 2 < src.size() && src[open + 2] == '+';
    if (minus) {
      const size_t keep = piece.find_last_not_of(" \t\r\n");
      piece.resize(keep == std::string::npos ? 0 : keep + 1);
    } else if (type != '{' && !plus) {
      const size_t nl = piece.rfind('\n');
      const size_t start = nl == std::string::npos ? 0 : nl + 1;
      if ((start > 0 || line_starting) && piece.find_first_not_of(" \t", start) == std::string::npos) piece.resize(start);
    }
    text += piece;
    const size_t inner = open + 2 + ((minus || plus) ? 1 : 0);
    const std::string_view close = type == '{' ? "}}" : type == '%' ? "%}" : "#}";
    const size_t end = type == '#' ? src.find(close, inner) : FindTagEnd(src, inner, close);
    if (end == std::string_view::npos) return LineError(line, std::string("unclosed '{") + type + "'");
    const bool minus_end = end > inner && src[end - 1] == '-';
    const std::string_view content = src.substr(inner, end - inner - (minus_end ? 1 : 0));
    if (type != '#') {
      if (!text.empty()) out.push_back({Segment::Kind::kText, std::move(text), line});
      text.clear();
      out.push_back({type == '{' ? Segment::Kind::kOutput : Segment::Kind::kBlock, std::string(content), line});
    }
    line += LinesIn(content);
    pos = end + 2;
    strip_next = minus_end;
    trim_newline = !minus_end && type != '{';
    line_starting = false;
  }
}

// ------------------------------------------------------------ expressions

struct Token {
  enum class Kind { kName, kNumber, kString, kOp, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;
  Json value;  // numbers and strings
};

StatusOr<std::vector<Token>> Tokenize(std::string_view s, int line) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::Kind::kName, std::string(s.substr(i, j - i)), {}});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool real = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_' ||
                              (s[j] == '.' && !real && j + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[j + 1]))))) {
        real = real || s[j] == '.';
        ++j;
      }
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {  // an exponent: 1e20, 2.5E-3
        size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
          while (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) ++k;
          j = k;
          real = true;
        }
      }
      std::string digits;
      for (size_t k = i; k < j; ++k) if (s[k] != '_') digits += s[k];
      Token t{Token::Kind::kNumber, digits, {}};
      t.value = real ? Json(std::strtod(digits.c_str(), nullptr)) : Json(std::strtoll(digits.c_str(), nullptr, 10));
      out.push_back(std::move(t));
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          v += s[j];
          continue;
        }
        const char e = s[++j];
        switch (e) {
          case 'n': v += '\n'; break;
          case 't': v += '\t'; break;
          case 'r': v += '\r'; break;
          case '\\': v += '\\'; break;
          case '\'': v += '\''; break;
          case '"': v += '"'; break;
          default: v += '\\'; v += e; break;
        }
      }
      if (j >= s.size()) return LineError(line, "unterminated string");
      out.push_back({Token::Kind::kString, "", Json(v)});
      i = j + 1;
    } else {
      static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ".", ",", ":",
                                   "|", "~", "+", "-", "*", "/", "%", "<", ">", "="};
      bool found = false;
      for (const char* op : kOps) {
        if (s.compare(i, std::strlen(op), op) == 0) {
          out.push_back({Token::Kind::kOp, op, {}});
          i += std::strlen(op);
          found = true;
          break;
        }
      }
      if (!found) return LineError(line, std::string("unexpected character '") + c + "'");
    }
  }
  out.push_back({Token::Kind::kEnd, "", {}});
  return out;
}

class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, int line) : t_(std::move(tokens)), line_(line) {}

  bool AtEnd() const { return t_[p_].kind == Token::Kind::kEnd; }
  bool IsName(const char* n) const { return t_[p_].kind == Token::Kind::kName && t_[p_].text == n; }
  bool IsOp(const char* o) const { return t_[p_].kind == Token::Kind::kOp && t_[p_].text == o; }
  const Token& Peek(size_t ahead = 0) const { return t_[std::min(p_ + ahead, t_.size() - 1)]; }
  Token Next() { return t_[p_ < t_.size() - 1 ? p_++ : p_]; }

  Status Expect(const char* op) {
    if (!IsOp(op)) return LineError(line_, std::string("expected '") + op + "', found '" + Peek().text + "'");
    ++p_;
    return Status::Ok();
  }
  StatusOr<std::string> Name() {
    if (Peek().kind != Token::Kind::kName) return LineError(line_, "expected a name, found '" + Peek().text + "'");
    return Next().text;
  }

  // expression := or ['if' or ['else' expression]]
  StatusOr<ExprPtr> Expression() {
    Nest nest(depth_);
    TANDEM_RETURN_IF_ERROR(Deeper());
    TANDEM_ASSIGN_OR_RETURN(ExprPtr then, Or());
    if (!IsName("if")) return then;
    ++p_;
    auto e = Make(Expr::Kind::kTernary);
    TANDEM_ASSIGN_OR_RETURN(ExprPtr cond, Or());
    e->args.push_back(std::move(then));
    e->args.push_back(std::move(cond));
    if (IsName("else")) {
      ++p_;
      TANDEM_ASSIGN_OR_RETURN(ExprPtr other, Expression());
      e->args.push_back(std::move(other));
    } else {
      e->args.push_back(nullptr);
    }
    return e;
  }

  // For `for` targets and `set` names: a, or a, b.
  StatusOr<std::vector<std::string>> Targets() {
    std::vector<std::string> names;
    do {
      if (!names.empty()) ++p_;
      TANDEM_ASSIGN_OR_RETURN(std::string n, Name());
      names.push_back(std::move(n));
    } while (IsOp(","));
    return names;
  }

  // An expression without a trailing ternary (a `for` filter, before `else`).
  StatusOr<ExprPtr> OrExpression() { return Or(); }

 private:
  // Every nesting of the tree counts against one budget: a parenthesis, a
  // `not` or sign, each operand of a chain (a + b + c nests left), each
  // filter, test, attribute, subscript or call. Deeper expressions are
  // refused, so neither parsing nor rendering recurses past it.
  static constexpr int kMaxNesting = 256;
  class Nest {  // restores the depth when its level is done
   public:
    explicit Nest(int& depth) : depth_(depth), saved_(depth) {}
    ~Nest() { depth_ = saved_; }

   private:
    int& depth_;
    const int saved_;
  };
  Status Deeper() {
    return ++depth_ > kMaxNesting ? LineError(line_, "an expression nested more than 256 deep") : Status::Ok();
  }

  ExprPtr Make(Expr::Kind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line_;
    return e;
  }
  ExprPtr Binary(const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = Make(Expr::Kind::kBinary);
    e->name = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  // One left-associative level: next (op next)*, op a keyword or a symbol.
  template <typename Level>
  StatusOr<ExprPtr> LeftAssociative(std::initializer_list<const char*> ops, Level next) {
    Nest nest(depth_);
    TANDEM_ASSIGN_OR_RETURN(ExprPtr a, (this->*next)());
    for (;;) {
      const char* op = nullptr;
      for (const char* o : ops) {
        if (IsName(o) || IsOp(o)) op = o;
      }
      if (op == nullptr) return a;
      TANDEM_RETURN_IF_ERROR(Deeper());
      ++p_;
      TANDEM_ASSIGN_OR_RETURN(ExprPtr b, (this->*next)());
      a = Binary(op, std::move(a), std::move(b));
    }
  }
  StatusOr<ExprPtr> Or() { return LeftAssociative({"or"}, &ExprParser::And); }
  StatusOr<ExprPtr> And() { return LeftAssociative({"and"}, &ExprParser::Not); }
  StatusOr<ExprPtr> Not() {
    Nest nest(depth_);
    TANDEM_RETURN_IF_ERROR(Deeper());
    if (IsName("not")) {
      ++p_;
      auto e = Make(Expr::Kind::kUnary);
      e->name = "not";
      TANDEM_ASSIGN_OR_RETURN(ExprPtr a, Not());
      e->args.push_back(std::move(a));
      return e;
    }
    return Compare();
  }
  StatusOr<ExprPtr> Compare() {
    Nest nest(depth_);
    TANDEM_ASSIGN_OR_RETURN(ExprPtr a, Math1());
    for (;;) {
      TANDEM_RETURN_IF_ERROR(Deeper());
      std::string op;
      if (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp(">") || IsOp("<=") || IsOp(">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        ++p_;
        op = "in";
      } else if (IsName("not") && Peek(1).kind == Token::Kind::kName && Peek(1).text == "in") {
        p_ += 2;
        op = "not in";
      } else {
        return a;
      }
      TANDEM_ASSIGN_OR_RETURN(ExprPtr b, Math1());
      a = Binary(op, std::move(a), std::move(b));
    }
  }
  StatusOr<ExprPtr> Math1() { return LeftAssociative({"+", "-"}, &ExprParser::Concat); }
  StatusOr<ExprPtr> Concat() { return LeftAssociative({"~"}, &ExprParser::Math2); }
  StatusOr<ExprPtr> Math2() { return LeftAssociative({"*", "/", "//", "%"}, &ExprParser::Pow); }
  StatusOr<ExprPtr> Pow() { return LeftAssociative({"**"}, &ExprParser::Unary); }
  StatusOr<ExprPtr> Unary() {
    Nest nest(depth_);
    TANDEM_RETURN_IF_ERROR(Deeper());
    if (IsOp("-") || IsOp("+")) {
      auto e = Make(Expr::Kind::kUnary);
      e->name = Next().text;
      TANDEM_ASSIGN_OR_RETURN(ExprPtr a, Unary());
      e->args.push_back(std::move(a));
      return FilterOrTest(std::move(e));
    }
    TANDEM_ASSIGN_OR_RETURN(ExprPtr a, Postfix());
    return FilterOrTest(std::move(a));
  }

  // Call arguments after '(': positional, then name=value.
  Status Arguments(Expr* e) {
    TANDEM_RETURN_IF_ERROR(Expect("("));
    while (!IsOp(")")) {
      if (!e->args.empty() || !e->kwargs.empty()) {
        if (e->kind == Expr::Kind::kCall && e->args.size() == 1 && e->kwargs.empty()) {
          // the callee is args[0]: the first argument needs no comma
        } else if (e->kind != Expr::Kind::kCall && e->args.size() == 1 && e->kwargs.empty()) {
          // a filter's or test's subject is args[0]
        } else {
          TANDEM_RETURN_IF_ERROR(Expect(","));
          if (IsOp(")")) break;
        }
      }
      if (Peek().kind == Token::Kind::kName && Peek(1).kind == Token::Kind::kOp && Peek(1).text == "=") {
        std::string key = Next().text;
        ++p_;
        TANDEM_ASSIGN_OR_RETURN(ExprPtr v, Expression());
        e->kwargs.emplace_back(std::move(key), std::move(v));
      } else {
        if (!e->kwargs.empty()) return LineError(line_, "a positional argument after a keyword argument");
        TANDEM_ASSIGN_OR_RETURN(ExprPtr v, Expression());
        e->args.push_back(std::move(v));
      }
    }
    return Expect(")");
  }

  StatusOr<ExprPtr> FilterOrTest(ExprPtr subject) {
    Nest nest(depth_);
    for (;;) {
      TANDEM_RETURN_IF_ERROR(Deeper());
      if (IsOp("|")) {
        ++p_;
        auto e = Make(Expr::Kind::kFilter);
        TANDEM_ASSIGN_OR_RETURN(e->name, Name());
        e->args.push_back(std::move(subject));
        if (IsOp("(")) TANDEM_RETURN_IF_ERROR(Arguments(e.get()));
        subject = std::move(e);
      } else if (IsName("is")) {
        ++p_;
        auto e = Make(Expr::Kind::kTest);
        if (IsName("not")) {
          ++p_;
          e->negated = true;
        }
        TANDEM_ASSIGN_OR_RETURN(e->name, Name());
        e->args.push_back(std::move(subject));
        if (IsOp("(")) {
          TANDEM_RETURN_IF_ERROR(Arguments(e.get()));
        } else if (!AtEnd() && (Peek().kind == Token::Kind::kString || Peek().kind == Token::Kind::kNumber ||
                                (Peek().kind == Token::Kind::kName && !IsName("and") && !IsName("or") &&
                                 !IsName("else") && !IsName("if") && !IsName("in") && !IsName("not") && !IsName("is")))) {
          TANDEM_ASSIGN_OR_RETURN(ExprPtr arg, Postfix());  // `is divisibleby 3`, `is sameas none`
          e->args.push_back(std::move(arg));
        }
        subject = std::move(e);
      } else {
        return subject;
      }
    }
  }

  StatusOr<ExprPtr> Postfix() {
    Nest nest(depth_);
    TANDEM_ASSIGN_OR_RETURN(ExprPtr e, Primary());
    for (;;) {
      TANDEM_RETURN_IF_ERROR(Deeper());
      if (IsOp(".")) {
        ++p_;
        auto a = Make(Expr::Kind::kAttr);
        TANDEM_ASSIGN_OR_RETURN(a->name, Name());
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (IsOp("[")) {
        ++p_;
        TANDEM_ASSIGN_OR_RETURN(e, Subscript(std::move(e)));
      } else if (IsOp("(")) {
        auto c = Make(Expr::Kind::kCall);
        c->args.push_back(std::move(e));
        TANDEM_RETURN_IF_ERROR(Arguments(c.get()));
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  StatusOr<ExprPtr> Subscript(ExprPtr subject) {
    ExprPtr parts[3];
    int n = 0;
    bool slice = false;
    for (;;) {
      if (IsOp("]")) break;
      if (IsOp(":")) {
        ++p_;
        slice = true;
        if (++n > 2) return LineError(line_, "a slice has at most three parts");
        continue;
      }
      TANDEM_ASSIGN_OR_RETURN(parts[n], Expression());
    }
    TANDEM_RETURN_IF_ERROR(Expect("]"));
    if (!slice) {
      auto e = Make(Expr::Kind::kIndex);
      e->args.push_back(std::move(subject));
      if (!parts[0]) return LineError(line_, "empty subscript");
      e->args.push_back(std::move(parts[0]));
      return e;
    }
    auto e = Make(Expr::Kind::kSlice);
    e->args.push_back(std::move(subject));
    for (auto& p : parts) e->args.push_back(std::move(p));
    return e;
  }

  StatusOr<ExprPtr> Primary() {
    const Token t = Next();
    if (t.kind == Token::Kind::kNumber || t.kind == Token::Kind::kString) {
      auto e = Make(Expr::Kind::kLiteral);
      e->literal = t.value;
      // Adjacent string literals concatenate, as in Python.
      while (t.kind == Token::Kind::kString && Peek().kind == Token::Kind::kString) {
        e->literal = e->literal.get<std::string>() + Next().value.get<std::string>();
      }
      return e;
    }
    if (t.kind == Token::Kind::kName) {
      auto e = Make(Expr::Kind::kLiteral);
      if (t.text == "true" || t.text == "True") e->literal = true;
      else if (t.text == "false" || t.text == "False") e->literal = false;
      else if (t.text == "none" || t.text == "None") e->literal = nullptr;
      else {
        e->kind = Expr::Kind::kName;
        e->name = t.text;
      }
      return e;
    }
    if (t.kind == Token::Kind::kOp && t.text == "(") {
      TANDEM_ASSIGN_OR_RETURN(ExprPtr first, Expression());
      if (IsOp(")")) {
        ++p_;
        return first;
      }
      auto list = Make(Expr::Kind::kList);  // a tuple: a list here
      list->args.push_back(std::move(first));
      while (IsOp(",")) {
        ++p_;
        if (IsOp(")")) break;
        TANDEM_ASSIGN_OR_RETURN(ExprPtr item, Expression());
        list->args.push_back(std::move(item));
      }
      TANDEM_RETURN_IF_ERROR(Expect(")"));
      return list;
    }
    if (t.kind == Token::Kind::kOp && (t.text == "[" || t.text == "{")) {
      const bool dict = t.text == "{";
      auto e = Make(dict ? Expr::Kind::kDict : Expr::Kind::kList);
      const char* close = dict ? "}" : "]";
      while (!IsOp(close)) {
        if (!e->args.empty()) {
          TANDEM_RETURN_IF_ERROR(Expect(","));
          if (IsOp(close)) break;
        }
        TANDEM_ASSIGN_OR_RETURN(ExprPtr item, Expression());
        e->args.push_back(std::move(item));
        if (dict) {
          TANDEM_RETURN_IF_ERROR(Expect(":"));
          TANDEM_ASSIGN_OR_RETURN(ExprPtr value, Expression());
          e->args.push_back(std::move(value));
        }
      }
      TANDEM_RETURN_IF_ERROR(Expect(close));
      return e;
    }
    return LineError(line_, "unexpected '" + (t.kind == Token::Kind::kEnd ? std::string("end of tag") : t.text) + "'");
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  int line_;
  int depth_ = 0;
};

StatusOr<ExprPtr> ParseWholeExpression(const std::string& text, int line) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(text, line));
  ExprParser p(std::move(tokens), line);
  TANDEM_ASSIGN_OR_RETURN(ExprPtr e, p.Expression());
  if (!p.AtEnd()) return LineError(line, "unexpected '" + p.Peek().text + "' after the expression");
  return e;
}

// ------------------------------------------------------------ statements

class StatementParser {
 public:
  explicit StatementParser(std::vector<Segment> segments) : s_(std::move(segments)) {}

  // Nodes until one of `ends` (a block keyword) or the end of the template;
  // *end gets the keyword found ("" at the end of the template).
  Status Nodes(std::vector<std::unique_ptr<Node>>* out, std::initializer_list<const char*> ends, std::string* end,
               ExprParser** end_tag) {
    // Blocks inside blocks: bounded, so neither parsing nor rendering recurses far.
    struct Level {
      int& depth;
      explicit Level(int& d) : depth(++d) {}
      ~Level() { --depth; }
    } level(depth_);
    if (depth_ > 64) return LineError(i_ < s_.size() ? s_[i_].line : 1, "blocks nested more than 64 deep");
    while (i_ < s_.size()) {
      const Segment& seg = s_[i_];
      if (seg.kind == Segment::Kind::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->text = seg.text;
        out->push_back(std::move(n));
        ++i_;
        continue;
      }
      if (seg.kind == Segment::Kind::kOutput) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->line = seg.line;
        TANDEM_ASSIGN_OR_RETURN(n->expr, ParseWholeExpression(seg.text, seg.line));
        out->push_back(std::move(n));
        ++i_;
        continue;
      }
      TANDEM_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(seg.text, seg.line));
      tags_.push_back(std::make_unique<ExprParser>(std::move(tokens), seg.line));
      ExprParser& tag = *tags_.back();
      TANDEM_ASSIGN_OR_RETURN(std::string keyword, tag.Name());
      ++i_;
      for (const char* e : ends) {
        if (keyword == e) {
          *end = keyword;
          *end_tag = &tag;
          return Status::Ok();
        }
      }
      TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Node> n, Statement(keyword, tag, seg.line));
      out->push_back(std::move(n));
    }
    *end = "";
    if (ends.size() > 0) return LineError(s_.empty() ? 1 : s_.back().line, std::string("missing '{% ") + *ends.begin() + " %}'");
    return Status::Ok();
  }

 private:
  static Status NothingMore(ExprParser& tag, int line) {
    return tag.AtEnd() ? Status::Ok() : LineError(line, "unexpected '" + tag.Peek().text + "' in the tag");
  }

  StatusOr<std::unique_ptr<Node>> Statement(const std::string& keyword, ExprParser& tag, int line) {
    auto n = std::make_unique<Node>();
    n->line = line;
    if (keyword == "if") {
      n->kind = Node::Kind::kIf;
      TANDEM_ASSIGN_OR_RETURN(ExprPtr cond, tag.Expression());
      TANDEM_RETURN_IF_ERROR(NothingMore(tag, line));
      for (;;) {
        std::vector<std::unique_ptr<Node>> body;
        std::string end;
        ExprParser* end_tag = nullptr;
        TANDEM_RETURN_IF_ERROR(Nodes(&body, {"endif", "elif", "else"}, &end, &end_tag));
        n->branches.emplace_back(std::move(cond), std::move(body));
        if (end == "endif") return n;
        if (end == "elif") {
          TANDEM_ASSIGN_OR_RETURN(cond, end_tag->Expression());
        } else {
          std::vector<std::unique_ptr<Node>> else_body;
          TANDEM_RETURN_IF_ERROR(Nodes(&else_body, {"endif"}, &end, &end_tag));
          n->branches.emplace_back(nullptr, std::move(else_body));
          return n;
        }
      }
    }
    if (keyword == "for") {
      n->kind = Node::Kind::kFor;
      TANDEM_ASSIGN_OR_RETURN(n->targets, tag.Targets());
      if (!tag.IsName("in")) return LineError(line, "expected 'in' in the for tag");
      tag.Next();
      TANDEM_ASSIGN_OR_RETURN(n->expr, tag.OrExpression());
      if (tag.IsName("if")) {
        tag.Next();
        TANDEM_ASSIGN_OR_RETURN(n->filter, tag.OrExpression());
      }
      if (tag.IsName("recursive")) return LineError(line, "recursive loops are not supported");
      TANDEM_RETURN_IF_ERROR(NothingMore(tag, line));
      std::string end;
      ExprParser* end_tag = nullptr;
      TANDEM_RETURN_IF_ERROR(Nodes(&n->body, {"endfor", "else"}, &end, &end_tag));
      if (end == "else") TANDEM_RETURN_IF_ERROR(Nodes(&n->else_body, {"endfor"}, &end, &end_tag));
      return n;
    }
    if (keyword == "set") {
      TANDEM_ASSIGN_OR_RETURN(std::string name, tag.Name());
      n->targets = {name};
      if (tag.IsOp(".")) {
        tag.Next();
        TANDEM_ASSIGN_OR_RETURN(n->attribute, tag.Name());
      }
      if (tag.IsOp("=")) {
        tag.Next();
        n->kind = Node::Kind::kSet;
        TANDEM_ASSIGN_OR_RETURN(n->expr, tag.Expression());
        TANDEM_RETURN_IF_ERROR(NothingMore(tag, line));
        return n;
      }
      if (!n->attribute.empty()) return LineError(line, "expected '=' after 'set " + name + "." + n->attribute + "'");
      TANDEM_RETURN_IF_ERROR(NothingMore(tag, line));
      n->kind = Node::Kind::kBlockSet;
      std::string end;
      ExprParser* end_tag = nullptr;
      TANDEM_RETURN_IF_ERROR(Nodes(&n->body, {"endset"}, &end, &end_tag));
      return n;
    }
    if (keyword == "generation") {  // Hugging Face's marker of assistant text: renders its body
      n->kind = Node::Kind::kGeneration;
      std::string end;
      ExprParser* end_tag = nullptr;
      TANDEM_RETURN_IF_ERROR(Nodes(&n->body, {"endgeneration"}, &end, &end_tag));
      return n;
    }
    return LineError(line, "'{% " + keyword + " %}' is not supported by this Jinja subset");
  }

  std::vector<Segment> s_;
  size_t i_ = 0;
  int depth_ = 0;
  std::vector<std::unique_ptr<ExprParser>> tags_;  // end tags stay alive while their block is parsed
};

}  // namespace

StatusOr<std::vector<std::unique_ptr<Node>>> ParseTemplate(std::string_view source) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<Segment> segments, Lex(source));
  StatementParser parser(std::move(segments));
  std::vector<std::unique_ptr<Node>> nodes;
  std::string end;
  ExprParser* end_tag = nullptr;
  TANDEM_RETURN_IF_ERROR(parser.Nodes(&nodes, {}, &end, &end_tag));
  return nodes;
}

}  // namespace tandem::jinja
