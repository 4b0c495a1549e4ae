// Recursive-descent MIL parser. Every read is bounds-checked through peek()/at_end(); every loop
// consumes input or fails, so malformed text always ends in an anelab::Error.
#include "framework/mil/parser.h"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "framework/core/error.h"
#include "framework/mil/check.h"

namespace anelab::mil {
namespace {

constexpr int kMaxRank = 16;
constexpr int kMaxNesting = 16;
constexpr int64_t kMaxDim = int64_t{1} << 31;
constexpr int64_t kMaxNumel = int64_t{1} << 40;

// Parses all of [b, e) as a double; hex: the digits after "0x" (hex-float syntax). Returns false for
// anything else; *out_of_range for overflow. std::from_chars for doubles is missing from libc++ before
// LLVM 20 (Apple clang, Zig's clang): there std::strtod does it, whose decimal point is the C locale's
// (anelab never calls setlocale).
bool parse_double(const char* b, const char* e, bool hex, double& v, bool* out_of_range) {
  *out_of_range = false;
#if defined(__cpp_lib_to_chars) && __cpp_lib_to_chars >= 201611L
  auto r = std::from_chars(b, e, v, hex ? std::chars_format::hex : std::chars_format::general);
  *out_of_range = r.ec == std::errc::result_out_of_range;
  return r.ec == std::errc() && r.ptr == e && b != e;
#else
  if (b == e || std::isspace(static_cast<unsigned char>(*b)) || *b == '+' || *b == '-') return false;
  const std::string s = (hex ? "0x" : "") + std::string(b, e);
  char* end = nullptr;
  errno = 0;
  v = std::strtod(s.c_str(), &end);
  *out_of_range = errno == ERANGE;
  return !*out_of_range && end == s.c_str() + s.size();
#endif
}

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

struct Token {  // a scalar value inside a literal
  enum Kind { kNumber, kString, kBool } kind;
  std::string text;  // number lexeme or string contents
  bool b = false;
  size_t pos = 0;
};

class Parser {
 public:
  Parser(std::string_view src, std::string source) : s_(src), source_(std::move(source)) {}

  Program program() {
    Program p;
    skip();
    keyword("program");
    expect('(', "'(' after program");
    std::string version = number_lexeme("program version such as 1.3");
    expect(')', "')'");
    p.dialect = version == "1.0" ? Dialect::kIos16 : Dialect::kIos18;
    if (accept('[')) skip_balanced();
    expect('{', "'{' opening the program body");
    while (!accept('}')) p.functions.push_back(function(p.dialect));
    skip();
    if (!at_end()) error("end of input after the closing '}'");
    if (p.functions.empty()) error_at(pos_, "at least one function", "'}'");
    return p;
  }

 private:
  // ---- low-level cursor --------------------------------------------------------------------
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }

  void skip() {
    while (!at_end()) {
      char c = s_[pos_];
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++pos_;
      } else if (c == '/' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '/') {
        while (!at_end() && s_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string describe(size_t at) const {
    if (at >= s_.size()) return "end of input";
    size_t n = 0;
    if (ident_char(s_[at]))
      while (at + n < s_.size() && ident_char(s_[at + n]) && n < 24) ++n;
    else
      n = 1;
    std::string t(s_.substr(at, n));
    for (char& c : t)
      if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
    return "'" + t + "'";
  }

  int line_of(size_t at) {
    at = std::min(at, s_.size());
    if (at < line_pos_) line_pos_ = 0, line_no_ = 1;
    for (; line_pos_ < at; ++line_pos_)
      if (s_[line_pos_] == '\n') ++line_no_;
    return line_no_;
  }

  [[noreturn]] void error_at(size_t at, const std::string& what, const std::string& got) {
    at = std::min(at, s_.size());
    int line = line_of(at);
    size_t bol = at;
    while (bol > 0 && s_[bol - 1] != '\n') --bol;
    fail("mil", source_, ":", line, ":", at - bol + 1, ": expected ", what, ", got ", got);
  }
  [[noreturn]] void error(const std::string& what) {
    skip();
    error_at(pos_, what, describe(pos_));
  }

  bool accept(char c) {
    skip();
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c, const char* what) {
    if (!accept(c)) error(what);
  }
  bool accept_arrow() {
    skip();
    if (s_.substr(pos_, 2) != "->") return false;
    pos_ += 2;
    return true;
  }

  std::string ident(const char* what) {
    skip();
    if (!ident_start(peek())) error(what);
    size_t b = pos_;
    while (!at_end() && ident_char(s_[pos_])) ++pos_;
    return std::string(s_.substr(b, pos_ - b));
  }
  void keyword(const char* kw) {
    size_t at = (skip(), pos_);
    if (ident(cat("'", kw, "'").c_str()) != kw) error_at(at, cat("'", kw, "'"), describe(at));
  }

  // [+-]? (inf | nan | 0x<hex>[.<hex>][p[+-]dd] | digits[.digits][e[+-]digits] | .digits...)
  std::string number_lexeme(const char* what) {
    skip();
    size_t b = pos_;
    if (peek() == '+' || peek() == '-') ++pos_;
    if (!at_end() && (std::isdigit(static_cast<unsigned char>(peek())) || peek() == '.' || ident_start(peek()))) {
      while (!at_end() &&
             (ident_char(s_[pos_]) || s_[pos_] == '.' ||
              ((s_[pos_] == '+' || s_[pos_] == '-') && pos_ > b && std::strchr("eEpP", s_[pos_ - 1]) != nullptr)))
        ++pos_;
    }
    if (pos_ == b || (pos_ == b + 1 && (s_[b] == '+' || s_[b] == '-'))) {
      pos_ = b;
      error(what);
    }
    return std::string(s_.substr(b, pos_ - b));
  }

  void skip_balanced() {  // after '[': skips to the matching ']' (strings respected)
    int depth = 1;
    while (depth > 0) {
      if (at_end()) error("']' closing the buildInfo attribute");
      char c = s_[pos_++];
      if (c == '"') {
        while (!at_end() && s_[pos_] != '"') pos_ += (s_[pos_] == '\\' && pos_ + 1 < s_.size()) ? 2 : 1;
        if (at_end()) error("closing '\"'");
        ++pos_;
      } else if (c == '[') {
        ++depth;
      } else if (c == ']') {
        --depth;
      }
    }
  }

  // ---- types and literals ------------------------------------------------------------------
  DType dtype() {
    size_t at = (skip(), pos_);
    std::string n = ident("a dtype");
    auto d = parse_dtype(n);
    if (!d) error_at(at, "a dtype (fp16, fp32, int32, int8, uint8, bool, string, ...)", "'" + n + "'");
    return *d;
  }

  int64_t int_token(const std::string& t, size_t at, const char* what) {
    int64_t v = 0;
    const char* b = t.data() + (t[0] == '+' ? 1 : 0);
    auto r = std::from_chars(b, t.data() + t.size(), v);
    if (r.ec != std::errc() || r.ptr != t.data() + t.size()) error_at(at, what, "'" + t + "'");
    return v;
  }

  TensorType type() {
    skip();
    size_t at = pos_;
    if (s_.substr(pos_, 7) != "tensor<") {
      if (!ident_start(peek())) error("a type such as tensor<fp16, [1, 768, 1, 256]> or fp16");
      return scalar_type(dtype());
    }
    pos_ += 7;
    TensorType t;
    t.dtype = dtype();
    expect(',', "',' after the dtype");
    expect('[', "'[' opening the shape");
    int64_t numel = 1;
    if (!accept(']')) {
      do {
        size_t dat = (skip(), pos_);
        int64_t d = int_token(number_lexeme("a dimension"), dat, "an integer dimension");
        if (d <= 0 || d > kMaxDim) error_at(dat, cat("a dimension in [1, ", kMaxDim, "]"), std::to_string(d));
        if (t.shape.size() >= kMaxRank) error_at(dat, cat("at most ", kMaxRank, " dimensions"), "more");
        numel *= d;
        if (numel > kMaxNumel) error_at(at, cat("a tensor of at most 2^40 elements"), t.str());
        t.shape.push_back(d);
      } while (accept(','));
      expect(']', "']' closing the shape");
    }
    expect('>', "'>' closing the tensor type");
    return t;
  }

  Token scalar_token() {
    skip();
    Token tk{Token::kNumber, "", false, pos_};
    if (peek() == '"') {
      tk.kind = Token::kString;
      ++pos_;
      while (true) {
        if (at_end()) error_at(tk.pos, "a closing '\"'", "end of input");
        char c = s_[pos_++];
        if (c == '"') break;
        if (c == '\\' && !at_end()) c = s_[pos_++];
        tk.text += c;
      }
      return tk;
    }
    if (ident_start(peek()) && (s_.substr(pos_, 4) == "true" || s_.substr(pos_, 5) == "false")) {
      std::string w = ident("true or false");
      if (w == "true" || w == "false") return {Token::kBool, w, w == "true", tk.pos};
      pos_ = tk.pos;
    }
    tk.text = number_lexeme("a number, string or bool");
    return tk;
  }

  void list(std::vector<Token>& out, int depth) {  // after '['
    if (depth > kMaxNesting) error("at most 16 nested '[' in a literal");
    if (accept(']')) return;
    do {
      if (accept('['))
        list(out, depth + 1);
      else
        out.push_back(scalar_token());
      if (static_cast<int64_t>(out.size()) > kMaxNumel) error("fewer literal elements");
    } while (accept(','));
    expect(']', "',' or ']' in the tensor literal");
  }

  double float_token(const Token& tk) {
    std::string t = tk.text;
    bool neg = !t.empty() && t[0] == '-';
    if (!t.empty() && (t[0] == '-' || t[0] == '+')) t = t.substr(1);
    double v = 0;
    std::string low;
    for (char c : t) low += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (low == "inf" || low == "infinity")
      v = std::numeric_limits<double>::infinity();
    else if (low == "nan")
      v = std::numeric_limits<double>::quiet_NaN();
    else {
      bool hex = low.size() > 2 && low[0] == '0' && low[1] == 'x';
      const char* b = t.data() + (hex ? 2 : 0);
      bool out_of_range = false;
      const bool ok = parse_double(b, t.data() + t.size(), hex, v, &out_of_range);
      if (out_of_range) error_at(tk.pos, "a float in range", "'" + tk.text + "'");
      if (!ok || t.empty()) error_at(tk.pos, "a float literal", "'" + tk.text + "'");
    }
    return neg ? -v : v;
  }

  void store(ConstValue& v, const Token& tk) {
    DType d = v.type.dtype;
    auto bad = [&](const char* what) {
      error_at(tk.pos, cat(what, " for ", dtype_name(d)), tk.kind == Token::kString ? "a string" : "'" + tk.text + "'");
    };
    if (d == DType::kString) {
      if (tk.kind != Token::kString) bad("a string");
      v.s = tk.text;
    } else if (d == DType::kBool) {
      if (tk.kind != Token::kBool) bad("true or false");
      v.i.push_back(tk.b);
    } else if (tk.kind != Token::kNumber) {
      bad("a number");
    } else if (is_float(d)) {
      v.f.push_back(float_token(tk));
    } else {
      int64_t x = int_token(tk.text, tk.pos, cat("an integer for ", dtype_name(d)).c_str());
      int64_t lo = 0, hi = std::numeric_limits<int64_t>::max();
      switch (d) {
        case DType::kInt32:
          lo = INT32_MIN, hi = INT32_MAX;
          break;
        case DType::kInt16:
          lo = INT16_MIN, hi = INT16_MAX;
          break;
        case DType::kInt8:
          lo = -128, hi = 127;
          break;
        case DType::kUint8:
          hi = 255;
          break;
        case DType::kUint16:
          hi = 65535;
          break;
        case DType::kUint4:
          hi = 15;
          break;
        case DType::kUint6:
          hi = 63;
          break;
        default:
          break;
      }
      if (x < lo || x > hi) error_at(tk.pos, cat("a value in [", lo, ", ", hi, "] for ", dtype_name(d)), tk.text);
      v.i.push_back(x);
    }
  }

  // <type>(<value> | [<values>] | BLOBFILE(path = <lit>, offset = <lit>))
  ConstValue literal() {
    ConstValue v;
    v.type = type();
    expect('(', "'(' opening the literal value");
    skip();
    size_t at = pos_;
    if (s_.substr(pos_, 8) == "BLOBFILE") {
      pos_ += 8;
      expect('(', "'(' after BLOBFILE");
      keyword("path");
      expect('=', "'='");
      ConstValue path = literal();
      expect(',', "','");
      keyword("offset");
      expect('=', "'='");
      ConstValue off = literal();
      expect(')', "')' closing BLOBFILE");
      if (path.type != scalar_type(DType::kString)) error_at(at, "path = string(\"...\")", path.type.str());
      if (off.type.rank() != 0 || !is_integer(off.type.dtype) || off.i.empty() || off.i[0] < 0)
        error_at(at, "offset = uint64(N)", off.type.str());
      if (v.type.rank() == 0) error_at(at, "a tensor type for a BLOBFILE literal", v.type.str());
      v.blob = BlobRef{path.s, static_cast<uint64_t>(off.i[0])};
    } else {
      std::vector<Token> toks;
      if (accept('['))
        list(toks, 1);
      else
        toks.push_back(scalar_token());
      if (v.type.dtype == DType::kString && (v.type.rank() != 0 || toks.size() != 1))
        error_at(at, "a single string", v.type.str());
      if (static_cast<int64_t>(toks.size()) != v.type.numel())
        error_at(at, cat(v.type.numel(), " element(s) for ", v.type.str()), std::to_string(toks.size()));
      for (const auto& tk : toks) store(v, tk);
    }
    expect(')', "')' closing the literal");
    return v;
  }

  // ---- functions and statements ------------------------------------------------------------
  Function function(Dialect dialect) {
    keyword("func");
    Function f;
    f.name = ident("a function name");
    expect('<', "'<' before the opset");
    size_t at = (skip(), pos_);
    std::string opset = ident("an opset (ios16, ios17, ios18)");
    if (opset != "ios16" && opset != "ios17" && opset != "ios18")
      error_at(at, "an opset (ios16, ios17, ios18)", "'" + opset + "'");
    if ((dialect == Dialect::kIos16 && opset == "ios18") || (dialect == Dialect::kIos18 && opset == "ios16"))
      error_at(at,
               cat("an opset matching the program version (",
                   dialect == Dialect::kIos16 ? "program(1.0) uses ios16" : "program(1.3) uses ios18",
                   "; mixing gives InvalidMILProgram)"),
               "'" + opset + "'");
    expect('>', "'>' after the opset");
    expect('(', "'(' opening the parameter list");
    if (!accept(')')) {
      do {
        TensorType t = type();
        f.inputs.emplace_back(ident("a parameter name"), t);
      } while (accept(','));
      expect(')', "',' or ')' in the parameter list");
    }
    expect('{', "'{' opening the function body");
    while (!accept('}')) statement(f);
    if (!accept_arrow()) error("'->' after the function body");
    expect('(', "'(' opening the output list");
    do f.outputs.push_back(ident("an output value name"));
    while (accept(','));
    expect(')', "',' or ')' in the output list");
    expect(';', "';' after the output list");
    return f;
  }

  void statement(Function& f) {
    skip();
    Operation op;
    op.line = line_of(pos_);
    op.type = type();
    op.output = ident("a value name");
    expect('=', "'=' after the value name");
    op.op = ident("an op name");
    expect('(', "'(' opening the call arguments");
    std::vector<Operation> inline_consts;
    if (!accept(')')) {
      do {
        std::string key = ident("an argument name");
        expect('=', "'=' after the argument name");
        skip();
        if (accept('(')) {
          Arg a{{}, true};
          do a.names.push_back(ident("a value name in the tuple"));
          while (accept(','));
          expect(')', "',' or ')' in the tuple");
          op.args.emplace_back(key, std::move(a));
        } else if (looks_like_literal()) {
          Operation c;
          c.op = "const";
          c.line = op.line;
          c.name = c.output = op.output + "_" + key;
          c.attrs.emplace_back("val", literal());
          c.type = c.attrs[0].second.type;
          op.args.emplace_back(key, Arg::value(c.output));
          inline_consts.push_back(std::move(c));
        } else {
          op.args.emplace_back(key, Arg::value(ident("a value name or a literal")));
        }
      } while (accept(','));
      expect(')', "',' or ')' in the call arguments");
    }
    if (accept('[')) {
      if (!accept(']')) {
        do {
          size_t at = (skip(), pos_);
          std::string key = ident("an attribute name");
          expect('=', "'=' after the attribute name");
          ConstValue v = literal();
          if (key == "name") {
            if (v.type.dtype != DType::kString || v.type.rank() != 0)
              error_at(at, "name = string(\"...\")", v.type.str());
            op.name = v.s;
          } else {
            op.attrs.emplace_back(key, std::move(v));
          }
        } while (accept(','));
        expect(']', "',' or ']' in the attributes");
      }
    }
    expect(';', "';' ending the statement");
    if (op.name.empty()) op.name = op.output;
    for (auto& c : inline_consts) f.ops.push_back(std::move(c));
    f.ops.push_back(std::move(op));
  }

  bool looks_like_literal() {  // a type followed by '(' : tensor<...>( or <dtype>(
    skip();
    if (s_.substr(pos_, 7) == "tensor<") return true;
    size_t p = pos_;
    while (p < s_.size() && ident_char(s_[p])) ++p;
    if (!parse_dtype(s_.substr(pos_, p - pos_))) return false;
    while (p < s_.size() && std::isspace(static_cast<unsigned char>(s_[p]))) ++p;
    return p < s_.size() && s_[p] == '(';
  }

  std::string_view s_;
  std::string source_;
  size_t pos_ = 0;
  size_t line_pos_ = 0;
  int line_no_ = 1;
};

}  // namespace

Program parse(std::string_view text, const std::string& source_name) {
  Parser parser(text, source_name);
  Program p = parser.program();
  check_program(p, source_name);
  return p;
}

}  // namespace anelab::mil
