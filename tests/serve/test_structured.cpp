// Structured output: the GBNF parser and recognizer (models/grammar/gbnf.h), JSON Schema -> GBNF
// (models/grammar/json_schema.h), the request fields (response_format, json_schema, grammar in infer/server/api.h)
// and constrained generation through the server's ModelPool with stories260K (skipped without the shared data).
//
// Every answer is checked by a validator written here from the JSON Schema definitions (not from the converter):
// a walk that samples random text the grammar allows, and 200 requests to the model, must all parse as JSON and
// validate against their schema.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "framework/core/error.h"
#include "infer/server/api.h"
#include "infer/server/engine_adapter.h"
#include "models/grammar/gbnf.h"
#include "models/grammar/json_schema.h"
#include "models/grammar/token_constraint.h"
#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/unicode.h"
#include "tests/common/test_data.h"
#include "tests/serve/stories_pool.h"

namespace anelab::grammar {
namespace {

using ojson = nlohmann::ordered_json;

bool accepts(const Grammar& g, std::string_view text) {
  Matcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

std::string error_of(std::string_view text) {
  try {
    Grammar::parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Gbnf, LiteralsClassesAndRepetitions) {
  const Grammar g = Grammar::parse(R"(
root ::= greeting " " name ("!" | "?")?   # a comment
greeting ::= "hi" | "hello"
name ::= [A-Z] [a-z]{1,3}
)");
  EXPECT_TRUE(accepts(g, "hi Bob"));
  EXPECT_TRUE(accepts(g, "hello Anna!"));
  EXPECT_TRUE(accepts(g, "hi Al?"));
  EXPECT_FALSE(accepts(g, "hi A"));      // {1,3}: at least one lower-case letter
  EXPECT_FALSE(accepts(g, "hi Abcde"));  // at most three
  EXPECT_FALSE(accepts(g, "hey Bob"));
  EXPECT_FALSE(accepts(g, "hi bob"));
  Matcher m(g);
  EXPECT_TRUE(m.accept_bytes("hi Bo"));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.finished());  // more letters or ! / ? may follow
  EXPECT_TRUE(m.accept_bytes("b!"));
  EXPECT_TRUE(m.finished());
  EXPECT_FALSE(m.accept_bytes("x"));
}

TEST(Gbnf, NegatedClassesAnyCharAndUnboundedRepetition) {
  const Grammar g = Grammar::parse("root ::= \"<\" [^>\\n]* \">\" .+\n");
  EXPECT_TRUE(accepts(g, "<abc>x"));
  EXPECT_TRUE(accepts(g, "<>\xC3\xA9\xE2\x82\xAC"));  // "é€" after: any code point
  EXPECT_FALSE(accepts(g, "<a\nb>x"));
  EXPECT_FALSE(accepts(g, "<ab>"));  // .+ needs one
  const Grammar r = Grammar::parse("root ::= \"a\"{2} \"b\"{,2} \"c\"{1,}\n");
  EXPECT_TRUE(accepts(r, "aac"));
  EXPECT_TRUE(accepts(r, "aabbccc"));
  EXPECT_FALSE(accepts(r, "ac"));
  EXPECT_FALSE(accepts(r, "aabbbc"));
}

TEST(Gbnf, EscapesAndUnicodeRanges) {
  const Grammar g = Grammar::parse(R"(root ::= "\x41\u00e9\"" [\u4e00-\u9fff]+ "\n")");
  EXPECT_TRUE(accepts(g, "A\xC3\xA9\"\xE4\xB8\xAD\xE6\x96\x87\n"));  // Aé"中文\n
  EXPECT_FALSE(accepts(g, "A\xC3\xA9\"x\n"));
}

TEST(Gbnf, PartialUtf8AcrossTokens) {
  const Grammar g = Grammar::parse("root ::= \"\xC3\xA9\" \"!\"\n");  // é!
  Matcher m(g);
  EXPECT_TRUE(m.allows("\xC3"));   // the first byte of é: could still become é
  EXPECT_FALSE(m.allows("\xC4"));  // Ā..Ŀ: never é
  EXPECT_TRUE(m.accept_bytes("\xC3"));
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.allows("\xA8"));  // è
  EXPECT_TRUE(m.accept_bytes("\xA9!"));
  EXPECT_TRUE(m.finished());
  Matcher n(g);
  EXPECT_FALSE(n.allows("\xA9"));  // a continuation byte first is not UTF-8
  // Overlong forms are not UTF-8: 0xC1 0xBB would be '{', 0xE0 0x81 0xBB too (byte tokens can spell them).
  const Grammar brace = Grammar::parse("root ::= \"{\"\n");
  Matcher b(brace);
  EXPECT_FALSE(b.allows("\xC1"));
  EXPECT_FALSE(b.allows("\xC1\xBB"));
  EXPECT_FALSE(b.allows("\xE0\x81"));
  EXPECT_TRUE(b.allows("{"));
  const Grammar any = Grammar::parse("root ::= .\n");
  Matcher a(any);
  EXPECT_FALSE(a.allows("\xED\xA0\x80"));  // a surrogate
  EXPECT_FALSE(a.allows("\xED\xA0"));      // can only become a surrogate: a dead end for the next token
  EXPECT_TRUE(a.allows("\xED\x9F"));       // U+D7C0..U+D7FF
  EXPECT_TRUE(a.allows("\xED"));
  EXPECT_FALSE(a.allows("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_TRUE(a.allows("\xF0\x9F\x98\x80"));   // U+1F600
}

TEST(Gbnf, ErrorsNameTheRuleAndLine) {
  EXPECT_NE(error_of("root ::= item\n").find("rule `item` is used but not defined"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\nx ::= y\n").find("line 2"), std::string::npos);
  EXPECT_NE(error_of("expr ::= \"a\"\n").find("no `root` rule"), std::string::npos);
  EXPECT_NE(error_of("root ::= root \"a\" | \"b\"\n").find("left-recursive"), std::string::npos);
  EXPECT_NE(error_of("root ::= (\"a\"?)*\n").find("left-recursive"), std::string::npos);  // a nullable loop
  EXPECT_NE(error_of("root ::= \"a\" \"b\n").find("unterminated literal"), std::string::npos);
  EXPECT_NE(error_of("root ::= [ab\n").find("unterminated character class"), std::string::npos);
  EXPECT_NE(error_of("root ::= [z-a]\n").find("end before its start"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"\\q\"\n").find("unknown escape"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{3,1}\n").find("n < m"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\nroot ::= \"b\"\n").find("defined twice"), std::string::npos);
  EXPECT_EQ(error_of("root ::= (\"a\"\n  | \"b\")\n"), "");  // newlines inside parentheses continue the rule
  // A repetition's generated rule never takes the name of a rule defined after it (the converter names rules x-2).
  EXPECT_EQ(error_of("root ::= x-1 x\nx ::= \"a\"{0,1}\nx-1 ::= \"b\"\nx-2 ::= \"c\"\n"), "");
  // A repeated literal is copied: 31 characters x 10000 is past the bound (a group repeats one rule reference).
  EXPECT_NE(error_of("root ::= \"0123456789012345678901234567890\"{10000}\n").find("more than 200000 elements"),
            std::string::npos);
  EXPECT_EQ(error_of("root ::= (\"a\"{10000}){10000}\n"), "");
  // An exponentially ambiguous grammar is stopped at the stack bound, not followed into unbounded memory.
  std::string amb = "root ::= x0\n";
  for (int i = 0; i < 16; ++i)
    amb += "x" + std::to_string(i) + " ::= x" + std::to_string(i + 1) + " | x" + std::to_string(i + 1) + "\n";
  amb += "x16 ::= \"a\"\n";
  const Grammar g = Grammar::parse(amb);
  EXPECT_THROW(Matcher{g}, Error);
}

// ---- an independent JSON Schema validator (the supported keywords, with their standard meaning) ----

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c >> 6) != 0x2;
  return n;
}

bool valid(const ojson& v, const ojson& s, const ojson& root);

bool valid_type(const ojson& v, const std::string& t) {
  if (t == "string") return v.is_string();
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  return false;
}

bool valid(const ojson& v, const ojson& s, const ojson& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const std::string r = s["$ref"];
    const std::string name = r.substr(r.rfind('/') + 1);
    return valid(v, root.contains("$defs") ? root["$defs"][name] : root["definitions"][name], root);
  }
  if (s.contains("type")) {
    bool ok = false;
    if (s["type"].is_array()) {
      for (const auto& t : s["type"]) ok = ok || valid_type(v, t);
    } else {
      ok = valid_type(v, s["type"]);
    }
    if (!ok) return false;
  }
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) return false;
  if (v.is_string()) {
    const size_t n = code_points(v.get<std::string>());
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return false;
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const auto& k : s["required"])
        if (!v.contains(k.get<std::string>())) return false;
    for (const auto& [k, x] : v.items()) {
      if (s.contains("properties") && s["properties"].contains(k)) {
        if (!valid(x, s["properties"][k], root)) return false;
      } else if (s.contains("additionalProperties") && !valid(x, s["additionalProperties"], root)) {
        return false;
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    size_t first = 0;
    if (s.contains("prefixItems")) {
      for (; first < s["prefixItems"].size() && first < v.size(); ++first)
        if (!valid(v[first], s["prefixItems"][first], root)) return false;
    }
    if (s.contains("items"))
      for (size_t i = first; i < v.size(); ++i)
        if (!valid(v[i], s["items"], root)) return false;
  }
  if (s.contains("anyOf")) {
    bool any = false;
    for (const auto& b : s["anyOf"]) any = any || valid(v, b, root);
    if (!any) return false;
  }
  if (s.contains("oneOf")) {
    int n = 0;
    for (const auto& b : s["oneOf"]) n += valid(v, b, root);
    if (n != 1) return false;
  }
  if (s.contains("allOf"))
    for (const auto& b : s["allOf"])
      if (!valid(v, b, root)) return false;
  return true;
}

// Schemas with nesting, enums, arrays, numbers (strings bounded so that a sampled answer ends).
const std::vector<std::string> kSchemas = {
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}},
        "required": ["name", "age"], "additionalProperties": false})",
    R"({"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}, "score": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3}},
        "required": ["color"]})",
    R"({"type": "array", "items": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
        "required": ["x", "y"]}, "minItems": 1, "maxItems": 3})",
    R"({"type": "object", "properties": {"ok": {"type": "boolean"}, "value": {"anyOf": [{"type": "null"},
        {"type": "number"}, {"type": "string", "maxLength": 5}]}}, "required": ["ok", "value"]})",
    R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"const": "k"}}})",
    R"({"$defs": {"node": {"type": "object", "properties": {"id": {"type": "integer"}, "kids": {"type": "array",
        "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["id", "kids"]}}, "$ref": "#/$defs/node"})",
    R"({"type": "object", "properties": {"point": {"type": "array", "prefixItems": [{"type": "number"},
        {"type": "number"}], "items": false}, "label": {"type": ["string", "null"], "maxLength": 6},
        "kind": {"oneOf": [{"type": "integer"}, {"enum": ["auto", "none"]}]}}, "required": ["point", "kind"]})",
    R"({"type": "object", "properties": {"matrix": {"type": "array", "items": {"type": "array",
        "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}, "minItems": 2, "maxItems": 2},
        "meta": {"type": "object", "properties": {"unit": {"enum": ["m", "s", 1, null, true]}}, "required": ["unit"]}},
        "required": ["matrix", "meta"]})",
};

// Random text the grammar allows: at each step one character from an alphabet (closing characters weighted up),
// ending when the grammar is complete and a coin says so (or nothing more can follow).
std::string random_sentence(const Grammar& g, std::mt19937& rng) {
  static const std::vector<std::string> alphabet = [] {
    std::vector<std::string> a;
    for (int c = 0x20; c < 0x7F; ++c) a.emplace_back(1, static_cast<char>(c));
    for (const char* u : {"\xC3\xA9", "\xE2\x82\xAC", "\n"}) a.emplace_back(u);
    return a;
  }();
  Matcher m(g);
  std::string out;
  for (int step = 0; step < 4000; ++step) {
    if (m.can_end() && (m.finished() || rng() % 4 == 0)) return out;
    std::vector<const std::string*> ok;
    for (const auto& c : alphabet)
      if (m.allows(c)) {
        ok.push_back(&c);
        if (c == "\"" || c == "]" || c == "}" || c == ",")
          for (int k = 0; k < 20; ++k) ok.push_back(&c);
      }
    if (ok.empty()) {
      ADD_FAILURE() << "grammar stuck after: " << out;
      return out;
    }
    const std::string& c = *ok[rng() % ok.size()];
    EXPECT_TRUE(m.accept_bytes(c));
    out += c;
  }
  ADD_FAILURE() << "no end after 4000 characters: " << out.substr(0, 200);
  return out;
}

TEST(JsonSchemaGrammar, EverySampledSentenceValidates) {
  std::mt19937 rng(7);
  int checked = 0;
  for (const auto& text : kSchemas) {
    const ojson schema = ojson::parse(text);
    const Grammar g = Grammar::parse(json_schema_to_gbnf(schema));
    for (int i = 0; i < 25; ++i) {
      const std::string s = random_sentence(g, rng);
      ojson v;
      ASSERT_NO_THROW(v = ojson::parse(s)) << s << "\nschema: " << text;
      EXPECT_TRUE(valid(v, schema, schema)) << s << "\nschema: " << text;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 200);
}

TEST(JsonSchemaGrammar, AcceptsValidAndRejectsInvalidDocuments) {
  const ojson schema = ojson::parse(kSchemas[0]);
  const Grammar g = Grammar::parse(json_schema_to_gbnf(schema));
  EXPECT_TRUE(accepts(g, R"({"name":"Bo","age":-12})"));
  EXPECT_TRUE(accepts(g, R"({"name": "Bo", "age": 0})"));
  EXPECT_FALSE(accepts(g, R"({"age":3,"name":"Bo"})"));         // properties come in the order listed
  EXPECT_FALSE(accepts(g, R"({"name":"Bo"})"));                 // age is required
  EXPECT_FALSE(accepts(g, R"({"name":"123456789","age":1})"));  // maxLength 8
  EXPECT_FALSE(accepts(g, R"({"name":"Bo","age":1.5})"));
  EXPECT_FALSE(accepts(g, R"({"name":"Bo","age":01})"));
  const Grammar any = Grammar::parse(json_object_gbnf());
  EXPECT_TRUE(accepts(any, R"({"a":[1,2.5e3,"x\n\u00e9",{"b":null}],"c":true})"));
  EXPECT_FALSE(accepts(any, R"([1,2])"));  // json_object: an object
  EXPECT_FALSE(accepts(any, R"({"a":1,})"));
}

// minimum / maximum on integers: every integer of a window (and the edges of the 16-digit range) is accepted exactly
// when it lies in the range, written without leading zeros or "-0".
TEST(JsonSchemaGrammar, IntegerRangesAcceptExactlyTheirIntegers) {
  struct Case {
    const char* schema;
    int64_t lo, hi;
  };
  const int64_t big = 9999999999999999;
  for (const Case& c :
       std::vector<Case>{{R"({"type": "integer", "minimum": 0, "maximum": 100})", 0, 100},
                         {R"({"type": "integer", "minimum": -37, "maximum": 1234})", -37, 1234},
                         {R"({"type": "integer", "minimum": -905, "maximum": -17})", -905, -17},
                         {R"({"type": "integer", "minimum": 7, "maximum": 7})", 7, 7},
                         {R"({"type": "integer", "exclusiveMinimum": 9, "exclusiveMaximum": 1000})", 10, 999},
                         {R"({"type": "integer", "minimum": 2.5, "maximum": 19.9})", 3, 19},
                         {R"({"type": "integer", "minimum": 990})", 990, big},
                         {R"({"type": "integer", "maximum": -1})", -big, -1}}) {
    const Grammar g = Grammar::parse(json_schema_to_gbnf(ojson::parse(c.schema)));
    std::vector<int64_t> probes = {-big, -big + 1, big - 1, big, c.lo - 1, c.lo, c.hi, c.hi + 1};
    for (int64_t x = -1200; x <= 1200; ++x) probes.push_back(x);
    for (const int64_t x : probes)
      ASSERT_EQ(accepts(g, std::to_string(x)), x >= c.lo && x <= c.hi) << x << " for " << c.schema;
    EXPECT_FALSE(accepts(g, "-0")) << c.schema;
    EXPECT_FALSE(accepts(g, "0" + std::to_string(std::max<int64_t>(c.lo, 1)))) << c.schema;  // a leading zero
    EXPECT_FALSE(accepts(g, std::to_string(c.lo) + ".0")) << c.schema;
  }
}

TEST(JsonSchemaGrammar, UnsupportedKeywordsAreRefusedByName) {
  auto error = [](const std::string& s) {
    try {
      json_schema_to_gbnf(ojson::parse(s));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error(R"({"type": "string", "pattern": "^a+$"})").find("'pattern' is not supported"), std::string::npos);
  EXPECT_NE(error(R"({"type": "number", "minimum": 0})").find("integers only"), std::string::npos);
  EXPECT_NE(error(R"({"type": "integer", "minimum": 5, "maximum": 4})").find("no integer lies"), std::string::npos);
  EXPECT_NE(error(R"({"type": "integer", "multipleOf": 2})").find("'multipleOf'"), std::string::npos);
  EXPECT_NE(error(R"({"properties": {"a": {"format": "date"}}})").find("at #/properties/a"), std::string::npos);
  EXPECT_NE(error(R"({"$ref": "#/$defs/missing"})").find("#/$defs/missing"), std::string::npos);
  EXPECT_NE(error(R"({"type": "object", "required": ["x"], "properties": {}})").find("'x' is not in properties"),
            std::string::npos);
  EXPECT_EQ(error(R"({"type": "string", "title": "t", "description": "d"})"), "");
}

// The mask over a real vocabulary: allowed tokens are exactly those whose piece the grammar accepts, and the time
// per mask is printed (a figure, not a check) for Qwen's 151665 tokens in three states of a JSON object.
TEST(TokenConstraint, MaskOverQwenVocabulary) {
  const std::string path = anelab::test::data_path("qwen/tokenizer.json");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared data absent: " << path;
  auto tk = tok::load_tokenizer(path);
  auto pieces = std::make_shared<const TokenPieces>(*tk, tk->vocab_size());
  auto g = std::make_shared<const Grammar>(Grammar::parse(json_object_gbnf()));
  const int32_t eos = tk->eos_id();
  GrammarConstraint c(g, pieces, {eos}, -1);
  std::vector<float> logits(static_cast<size_t>(tk->vocab_size()));
  for (const char* prefix : {"", R"({"na)", R"({"name": 12)"}) {
    GrammarConstraint at = c;
    for (const int32_t id : tk->encode(prefix, {})) at.accept(id);
    std::fill(logits.begin(), logits.end(), 0.0f);
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t allowed = at.mask(logits);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[structured] mask after '%s': %lld of %zu tokens allowed, %.2f ms\n", prefix,
                static_cast<long long>(allowed), logits.size(), ms);
    int64_t n = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      const auto id = static_cast<int32_t>(i);
      Matcher m(*g);
      ASSERT_TRUE(m.accept_bytes(prefix));
      const std::string p = tk->decode_token(0, id);
      const bool want = id == eos ? false : (!p.empty() && pieces->control[i] == 0 && m.allows(p));
      EXPECT_EQ(logits[i] == 0.0f, want) << "token " << id << " '" << p << "' after '" << prefix << "'";
      n += want;
      if (::testing::Test::HasFailure()) return;
    }
    EXPECT_EQ(n, allowed);
    EXPECT_GT(allowed, 0);
  }
}

// A byte-level vocabulary (256 byte tokens) with multi-byte added tokens (Qwen's non-special <tool_call> and
// </tool_call>, 11 and 12 bytes): under a string of at most 8 characters no 12-byte token fits, and at every step
// the mask allows exactly the tokens whose piece the recognizer accepts (Matcher::allows, the reference), and some
// token always stays allowed until the text can end.
TEST(TokenConstraint, MaskOfLongPiecesUnderBoundedRepetitions) {
  tok::VocabData v;
  v.kind = tok::TokenizerKind::kByteBpe;
  v.pre = "gpt2";
  for (int b = 0; b < 256; ++b) {
    std::string t;
    tok::utf8_append(t, tok::byte_to_unicode(static_cast<uint8_t>(b)));
    v.tokens.push_back(t), v.types.push_back(tok::TokenType::kNormal);
  }
  for (const char* t : {"<|endoftext|>", "<tool_call>", "</tool_call>", "abcdefgh"}) {
    v.tokens.push_back(t);
    v.types.push_back(std::string(t) == "<|endoftext|>" ? tok::TokenType::kControl : tok::TokenType::kUserDefined);
  }
  v.eos_id = 256;
  v.add_space_prefix = false;
  auto tk = tok::make_tokenizer(std::move(v));
  auto pieces = std::make_shared<const TokenPieces>(*tk, tk->vocab_size());
  std::mt19937 rng(38);
  for (const char* schema : {R"({"type": "string", "maxLength": 8})", R"({"type": "array", "items": {"type": "string",
                                  "maxLength": 3}, "maxItems": 2})",
                             R"({"enum": ["</tool_call>", "<tool"]})"}) {
    auto g = std::make_shared<const Grammar>(Grammar::parse(json_schema_to_gbnf(ojson::parse(schema))));
    for (int walk = 0; walk < 300; ++walk) {
      GrammarConstraint c(g, pieces, {256}, -1);
      Matcher ref(*g);
      std::string text;
      for (int step = 0; step < 64 && !c.finished(); ++step) {
        std::vector<float> logits(static_cast<size_t>(tk->vocab_size()), 0.0f);
        c.mask(logits);
        std::vector<int32_t> ok;
        for (int32_t id = 0; id < tk->vocab_size(); ++id) {
          const bool want = id == 256 ? ref.can_end() : ref.allows(tk->decode_token(0, id));
          ASSERT_EQ(logits[static_cast<size_t>(id)] == 0.0f, want)
              << "token " << id << " '" << tk->decode_token(0, id) << "' after '" << text << "' (" << schema << ")";
          if (want && id != 256) ok.push_back(id);
        }
        // A byte token may begin a UTF-8 sequence: the mask must never enter one that cannot complete (0xED 0xA0
        // leads only to surrogates), which would leave the next step nothing to sample.
        ASSERT_TRUE(!ok.empty() || ref.can_end()) << "dead end after '" << text << "' (" << schema << ")";
        if (ok.empty()) break;
        const int32_t id = ok[rng() % ok.size()];
        c.accept(id);
        ASSERT_TRUE(ref.accept_bytes(tk->decode_token(0, id)));
        text += tk->decode_token(0, id);
      }
    }
  }
}

}  // namespace
}  // namespace anelab::grammar

namespace anelab::serve {
namespace {

using ojson = nlohmann::ordered_json;

TEST(StructuredRequest, FieldsAreParsedAndBadOnesNamed) {
  Limits lim;
  CompletionRequest r;
  EXPECT_FALSE(
      parse_request(Endpoint::kChat,
                    R"({"messages": [{"role": "user", "content": "q"}], "response_format": {"type": "json_schema",
                                 "json_schema": {"name": "x", "strict": true, "schema": {"type": "object",
                                 "properties": {"b": {"type": "integer"}, "a": {"type": "integer"}}, "required": ["b", "a"]}}}})",
                    lim, r));
  ASSERT_TRUE(r.grammar);
  {
    grammar::Matcher m(*r.grammar);  // the listed order (b, a), not the parser's sorted one
    EXPECT_TRUE(m.accept_bytes(R"({"b":1,"a":2})") && m.can_end());
  }
  EXPECT_FALSE(parse_request(Endpoint::kCompletions, R"({"prompt": "p", "grammar": "root ::= [0-9]+"})", lim, r));
  ASSERT_TRUE(r.grammar);
  EXPECT_FALSE(parse_request(Endpoint::kCompletions, R"({"prompt": "p", "json_schema": {"type": "boolean"}})", lim, r));
  ASSERT_TRUE(r.grammar);
  EXPECT_FALSE(parse_request(Endpoint::kChat,
                             R"({"messages": [{"role": "user", "content": "q"}], "response_format": {"type": "text"}})",
                             lim, r));
  EXPECT_FALSE(r.grammar);

  auto err = [&](Endpoint ep, const std::string& body) {
    auto e = parse_request(ep, body, lim, r);
    return e ? e->param + " | " + e->message : std::string("accepted");
  };
  EXPECT_NE(err(Endpoint::kCompletions, R"({"prompt": "p", "grammar": "root ::= x"})")
                .find("grammar | 'grammar': [grammar] line 1"),
            std::string::npos);
  EXPECT_NE(err(Endpoint::kChat,
                R"({"messages": [{"role": "user", "content": "q"}], "response_format": {"type": "json_schema",
                 "json_schema": {"name": "x", "schema": {"type": "string", "format": "email"}}}})")
                .find("response_format.json_schema.schema | "),
            std::string::npos);
  EXPECT_NE(
      err(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "q"}], "response_format": {"type": "yaml"}})")
          .find("response_format.type"),
      std::string::npos);
  EXPECT_NE(err(Endpoint::kCompletions, R"({"prompt": "p", "grammar": "root ::= \"a\"", "json_schema": {}})")
                .find("at most one"),
            std::string::npos);
}

// 200 requests to stories260K (a story model: it would never write JSON by itself), each answer sampled under its
// schema's grammar at temperature 1: every answer parses and validates.
TEST(StructuredGeneration, TwoHundredSchemaAnswersValidate) {
  auto made = test::stories_pool();
  if (!made) GTEST_SKIP() << "shared data absent: " << anelab::test::data_path("llama2c/stories260K.bin");
  ModelPool& pool = *made;
  Limits lim;
  lim.max_tokens_cap = 400;
  int valid_answers = 0, grammar_ends = 0;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t tokens = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string& schema_text =
        anelab::grammar::kSchemas[static_cast<size_t>(i) % anelab::grammar::kSchemas.size()];
    const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 400, "temperature": 1.0, "seed": )" +
                             std::to_string(i + 1) + R"(, "json_schema": )" + schema_text + "}";
    CompletionRequest r;
    ASSERT_FALSE(parse_request(Endpoint::kCompletions, body, lim, r)) << body;
    GenParams p;
    ASSERT_FALSE(pool.prepare(r, p));
    Job job(p);
    job.started = std::chrono::steady_clock::now();
    const GenOutcome out = pool.run(0, job);
    tokens += out.usage.completion_tokens;
    grammar_ends += out.stop_reason == "grammar" || out.stop_reason == "eos";
    ojson v;
    try {
      v = ojson::parse(out.text);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "answer " << i << " (stop " << out.stop_reason << ") is not JSON: " << out.text;
      continue;
    }
    const ojson schema = ojson::parse(schema_text);
    if (anelab::grammar::valid(v, schema, schema))
      ++valid_answers;
    else
      ADD_FAILURE() << "answer " << i << " does not validate: " << out.text << "\nschema: " << schema_text;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[structured] 200 answers, %d valid, %d ended by the grammar or EOS, %lld tokens in %.2f s\n",
              valid_answers, grammar_ends, static_cast<long long>(tokens), s);
  EXPECT_EQ(valid_answers, 200);
}

}  // namespace
}  // namespace anelab::serve
