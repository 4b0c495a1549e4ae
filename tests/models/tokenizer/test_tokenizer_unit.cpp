// Unit tests: UTF-8/Unicode tables and NFC (checked against Python's unicodedata), pre-tokenizer regex
// semantics, special tokens, streaming decode, error handling for bad input and corrupt files, fuzzing,
// the Qwen2.5 chat template and the token-file layouts of `anelab tokenize`.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "framework/core/error.h"
#include "models/tokenizer/chat_template.h"
#include "models/tokenizer/pretokenize.h"
#include "models/tokenizer/token_file.h"
#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/unicode.h"
#include "tests/models/tokenizer/tok_test_util.h"

namespace anelab::tok {
namespace {

const Tokenizer& cached(const std::string& rel) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& t = cache[rel];
  if (!t) t = load_tokenizer(anelab::test::data_path(rel));
  return *t;
}

const char* kAllTokenizers[] = {"llama2c/tokenizer.bin", "llama2c/tok512.bin", "gpt2", "qwen/tokenizer.json"};

std::string run_python(const std::string& script, const std::string& input) {
  const auto dir = anelab::test::temp_dir("py");
  const std::string in = (dir / "in.bin").string(), py = (dir / "s.py").string(), out = (dir / "out.bin").string();
  write_file_atomic(in, input);
  write_file_atomic(py, script);
  const std::string cmd = "/usr/bin/python3 " + py + " " + in + " " + out;
  if (std::system(cmd.c_str()) != 0) return "<python failed>";
  return read_file_text(out);
}

// ---- Unicode ---------------------------------------------------------------------------------------

TEST(Unicode, Utf8DecoderRejectsMalformedSequences) {
  char32_t cp;
  EXPECT_EQ(utf8_decode("\xC3\xA9", 0, &cp), 2);
  EXPECT_EQ(cp, 0xE9u);
  EXPECT_EQ(utf8_decode("\xF0\x9F\xA6\x99", 0, &cp), 4);
  EXPECT_EQ(cp, 0x1F999u);
  for (std::string bad : {"\xC0\x80", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xC3", "\x80", "\xFF",
                          "\xE2\x82", "\xF8\x88\x80\x80\x80"})
    EXPECT_EQ(utf8_decode(bad, 0, &cp), 0) << "accepted a malformed sequence of " << bad.size() << " bytes";
  EXPECT_EQ(utf8_find_invalid("ab\xC3\xA9z\xFFq"), 5u);
  EXPECT_EQ(utf8_replace_invalid("a\xFF"
                                 "b"),
            "a\xEF\xBF\xBD"
            "b");
}

TEST(Unicode, ClassesMatchPythonUnicodedata) {
  // Every 7th code point plus a few edges, classified by Python; compared with the generated tables.
  std::string cps;
  for (uint32_t c = 0; c < 0x110000; c += (c < 0x3000 ? 1 : 7)) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    cps += std::to_string(c) + "\n";
  }
  const std::string py =
      "import sys, unicodedata as u\n"
      "ws={0x9,0xa,0xb,0xc,0xd,0x20,0x85,0xa0,0x1680,0x2028,0x2029,0x202f,0x205f,0x3000}|set(range(0x2000,0x200b))\n"
      "out=[]\n"
      "for l in open(sys.argv[1]).read().split():\n"
      "  c=int(l); k=u.category(chr(c))[0]\n"
      "  out.append(str((1 if k=='L' else 2 if k=='N' else 0)|(4 if c in ws else 0)))\n"
      "open(sys.argv[2],'w').write(' '.join(out))\n";
  const std::string got_py = run_python(py, cps);
  ASSERT_NE(got_py, "<python failed>");
  std::istringstream a(cps), b(got_py);
  uint32_t c;
  int want, n = 0, bad = 0;
  while (a >> c && b >> want) {
    const int got = char_class(c) & (kClsLetter | kClsNumber | kClsSpace);
    if (got != want && bad++ < 5) ADD_FAILURE() << "U+" << std::hex << c << ": got " << got << " want " << want;
    ++n;
  }
  EXPECT_GT(n, 150000);
  EXPECT_EQ(bad, 0);
}

TEST(Unicode, NfcMatchesPython) {
  // Random sequences over characters that exercise decomposition, reordering, composition, exclusions,
  // singletons and Hangul; normalized here and by Python, compared line by line.
  const char32_t pool[] = {'a',    'e',    'o',    'A',    ' ',    0x300,  0x301,  0x302,   0x308,   0x323,
                           0x327,  0x328,  0x31B,  0x345,  0x3B1,  0x399,  0x1F00, 0xE9,    0x1EC7,  0x212B,
                           0x2126, 0x340,  0x344,  0x958,  0x915,  0x93C,  0x1100, 0x1161,  0x11A8,  0xAC00,
                           0xAC01, 0x1B05, 0x1B35, 0x5D1,  0x5BC,  0xFB2C, 0x0F73, 0x1D15E, 0x1D165, 0x4E2D,
                           0x0CC6, 0x0CC2, 0x0CD5, 0x3099, 0x304B, 0x30A6};
  std::mt19937 rng(7);
  std::string input;
  std::vector<std::string> lines;
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    const int len = 1 + rng() % 8;
    for (int k = 0; k < len; ++k) utf8_append(s, pool[rng() % std::size(pool)]);
    lines.push_back(s);
    input += s + "\n";
  }
  const std::string py =
      "import sys, unicodedata as u\n"
      "t=open(sys.argv[1],encoding='utf-8').read()\n"
      "open(sys.argv[2],'w',encoding='utf-8').write(''.join(u.normalize('NFC',l)+'\\n' for l in "
      "t.split('\\n')[:-1]))\n";
  const std::string want = run_python(py, input);
  ASSERT_NE(want, "<python failed>");
  std::istringstream w(want);
  std::string line;
  int bad = 0;
  for (const auto& s : lines) {
    std::getline(w, line);
    if (nfc(s) != line && bad++ < 5) ADD_FAILURE() << "NFC differs for input of " << s.size() << " bytes";
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(nfc("plain ascii"), "plain ascii");
}

// ---- Pre-tokenizers (expected splits derived by hand from the regex semantics) -------------------------

std::vector<std::string> split(std::string_view s, PreTokenizer p) {
  std::vector<std::pair<uint32_t, uint32_t>> r;
  pretokenize(s, p, r);
  std::vector<std::string> out;
  for (auto [a, b] : r) out.emplace_back(s.substr(a, b - a));
  return out;
}

TEST(PreTokenizer, Gpt2RegexSemantics) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Hello world", PreTokenizer::kGpt2), (V{"Hello", " world"}));
  EXPECT_EQ(split("a  b", PreTokenizer::kGpt2), (V{"a", " ", " b"}));
  EXPECT_EQ(split("a   ", PreTokenizer::kGpt2), (V{"a", "   "}));
  EXPECT_EQ(split("it's 42!!", PreTokenizer::kGpt2), (V{"it", "'s", " 42", "!!"}));
  EXPECT_EQ(split("x\n\n y", PreTokenizer::kGpt2), (V{"x", "\n\n", " y"}));
  EXPECT_EQ(split("I'VE", PreTokenizer::kGpt2), (V{"I", "'", "VE"}));
}

TEST(PreTokenizer, Qwen2RegexSemantics) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split("I'VE 123", PreTokenizer::kQwen2), (V{"I", "'VE", " ", "1", "2", "3"}));
  EXPECT_EQ(split("\"Hi\" ok", PreTokenizer::kQwen2), (V{"\"Hi", "\"", " ok"}));
  EXPECT_EQ(split("a.\n\nb", PreTokenizer::kQwen2), (V{"a", ".\n\n", "b"}));
  EXPECT_EQ(split("a \n  b", PreTokenizer::kQwen2), (V{"a", " \n", " ", " b"}));
  EXPECT_EQ(split("\tword", PreTokenizer::kQwen2), (V{"\tword"}));
}

TEST(PreTokenizer, SelectionByRegexAndName) {
  EXPECT_EQ(select_pretokenizer("", pretokenizer_regex(PreTokenizer::kQwen2)), PreTokenizer::kQwen2);
  EXPECT_EQ(select_pretokenizer("gpt2", ""), PreTokenizer::kGpt2);
  EXPECT_THROW(select_pretokenizer("", "\\w+"), Error);
  EXPECT_THROW(select_pretokenizer("llama-bpe", ""), Error);
}

// ---- Behaviour ---------------------------------------------------------------------------------------

TEST(Tokenizer, EmptyInputAndBosEos) {
  for (const char* t : kAllTokenizers) {
    ANELAB_REQUIRE_DATA(t);
    const Tokenizer& tok = cached(t);
    EXPECT_TRUE(tok.encode("").empty()) << t;
    EXPECT_EQ(tok.decode(std::vector<int32_t>{}), "") << t;
  }
  ANELAB_REQUIRE_DATA("llama2c/tokenizer.bin");
  const Tokenizer& l = cached("llama2c/tokenizer.bin");
  EncodeOptions o;
  o.add_bos = o.add_eos = true;
  const auto ids = l.encode("Hi", o);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(l.decode(ids), "Hi");
}

TEST(Tokenizer, SpecialTokensOnlyWhenAllowed) {
  ANELAB_REQUIRE_DATA("qwen/tokenizer.json");
  ANELAB_REQUIRE_DATA("gpt2");
  ANELAB_REQUIRE_DATA("llama2c/tokenizer.bin");
  const Tokenizer& q = cached("qwen/tokenizer.json");
  const int32_t im_start = q.token_to_id("<|im_start|>");
  ASSERT_GT(im_start, 0);
  EncodeOptions allow;
  allow.allow_special = true;
  const std::string text = "<|im_start|>user\nhi<|im_end|>";
  const auto plain = q.encode(text);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), im_start), 0);
  EXPECT_EQ(q.decode(plain), text);
  const auto special = q.encode(text, allow);
  ASSERT_FALSE(special.empty());
  EXPECT_EQ(special.front(), im_start);
  EXPECT_EQ(special.back(), q.token_to_id("<|im_end|>"));
  EXPECT_EQ(q.decode(special, /*keep_special=*/true), text);
  EXPECT_EQ(q.decode(special), "user\nhi");
  // Non-special added tokens are matched like Hugging Face does.
  EXPECT_EQ(q.encode("<tool_call>"), std::vector<int32_t>{q.token_to_id("<tool_call>")});

  const Tokenizer& g = cached("gpt2");
  EXPECT_NE(g.encode("<|endoftext|>"), std::vector<int32_t>{50256});
  EXPECT_EQ(g.encode("<|endoftext|>", allow), std::vector<int32_t>{50256});

  const Tokenizer& l = cached("llama2c/tokenizer.bin");
  const auto s = l.encode("<s>Hi</s>", allow);
  EXPECT_EQ(s.front(), 1);
  EXPECT_EQ(s.back(), 2);
  EXPECT_EQ(l.decode(s, true), "<s>Hi</s>");
  const auto p = l.encode("<s>");
  EXPECT_EQ(std::count(p.begin(), p.end(), 1), 0);
}

TEST(Tokenizer, StreamingDecodeMatchesRunC) {
  ANELAB_REQUIRE_DATA("llama2c/tokenizer.bin");
  const Tokenizer& l = cached("llama2c/tokenizer.bin");
  const std::string text = "Once upon a time, 🦙 said\nhi.";
  EncodeOptions o;
  o.add_bos = true;
  const auto ids = l.encode(text, o);
  std::string streamed;
  for (size_t i = 1; i < ids.size(); ++i) streamed += l.decode_token(ids[i - 1], ids[i]);
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(l.decode_token(-1, ids[1]), " Once");  // no BOS before it: the space stays (run.c)
}

TEST(Tokenizer, InvalidUtf8IsAnErrorOrReplaced) {
  for (const char* t : kAllTokenizers) {
    ANELAB_REQUIRE_DATA(t);
    const Tokenizer& tok = cached(t);
    try {
      tok.encode(
          "abc\xFF"
          "def");
      ADD_FAILURE() << t << ": no error for invalid UTF-8";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("byte offset 3"), std::string::npos) << e.what();
    }
    EncodeOptions rep;
    rep.invalid_utf8 = InvalidUtf8::kReplace;
    EXPECT_EQ(tok.decode(tok.encode("abc\xFF"
                                    "def",
                                    rep)),
              "abc\xEF\xBF\xBD"
              "def")
        << t;
  }
}

TEST(Tokenizer, UnknownIdsInDecodeThrow) {
  for (const char* t : kAllTokenizers) {
    ANELAB_REQUIRE_DATA(t);
    const Tokenizer& tok = cached(t);
    EXPECT_THROW(tok.decode(std::vector<int32_t>{tok.vocab_size()}), Error) << t;
    EXPECT_THROW(tok.decode(std::vector<int32_t>{-1}), Error) << t;
    EXPECT_THROW(tok.decode_token(-1, tok.vocab_size() + 5), Error) << t;
    EXPECT_THROW(tok.token_text(-3), Error) << t;
  }
}

TEST(Tokenizer, FuzzRandomBytesAndIds) {
  std::mt19937 rng(1234);
  for (const char* t : kAllTokenizers) {
    ANELAB_REQUIRE_DATA(t);
    const Tokenizer& tok = cached(t);
    for (int it = 0; it < 300; ++it) {
      std::string s(rng() % 64, '\0');
      for (char& c : s) c = static_cast<char>(rng() % 4 == 0 ? rng() % 256 : " aé\n'1!\x80\xE2"[rng() % 10]);
      try {
        tok.encode(s);
      } catch (const Error&) {
      }
      EncodeOptions rep;
      rep.invalid_utf8 = InvalidUtf8::kReplace;
      rep.allow_special = it % 2;
      const std::string fixed = utf8_replace_invalid(s);
      const auto ids = tok.encode(s, rep);
      const std::string want = tok.vocab().nfc_normalize ? nfc(fixed) : fixed;
      EXPECT_EQ(tok.decode(ids, true), want) << t << " iteration " << it;
      std::vector<int32_t> rid(rng() % 16);
      for (auto& x : rid) x = static_cast<int32_t>(rng() % (tok.vocab_size() + 10)) - 5;
      try {
        tok.decode(rid);
      } catch (const Error&) {
      }
    }
  }
}

// The GGUF reader fills VocabData the llama.cpp way (SentencePiece pieces with U+2581, pre-tokenizer by
// name): make_tokenizer must give the same ids as the file loaders.
TEST(Tokenizer, GgufStyleVocabDataGivesSameIds) {
  ANELAB_REQUIRE_DATA("llama2c/tokenizer.bin");
  ANELAB_REQUIRE_DATA("qwen/tokenizer.json");
  ANELAB_REQUIRE_DATA("tokenizer-vectors/ggml-vocab-llama-spm.gguf.inp");
  const auto inputs =
      test::read_vector_inputs(anelab::test::data_path("tokenizer-vectors/ggml-vocab-llama-spm.gguf.inp"));
  VocabData spm = load_vocab_llama2c(anelab::test::data_path("llama2c/tokenizer.bin"));
  for (auto& t : spm.tokens) {
    std::string r;
    for (char c : t) r += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
    t = r;
  }
  VocabData qwen = load_vocab_hf_json(anelab::test::data_path("qwen/tokenizer.json"));
  qwen.pre_regex.clear();
  qwen.pre = "qwen2";
  const auto spm_tok = make_tokenizer(spm);
  const auto qwen_tok = make_tokenizer(qwen);
  for (const auto& in : inputs) {
    EXPECT_EQ(spm_tok->encode(in), cached("llama2c/tokenizer.bin").encode(in)) << in;
    EXPECT_EQ(qwen_tok->encode(in), cached("qwen/tokenizer.json").encode(in)) << in;
  }
  spm.scores.pop_back();
  EXPECT_THROW(make_tokenizer(spm), Error);
  qwen.pre = "bogus";
  EXPECT_THROW(make_tokenizer(qwen), Error);
}

// ---- Corrupt inputs ------------------------------------------------------------------------------------

TEST(Loaders, TruncatedAndCorruptTokenizerBin) {
  ANELAB_REQUIRE_DATA("llama2c/tok512.bin");
  const auto bytes = read_file_bytes(anelab::test::data_path("llama2c/tok512.bin"));
  EXPECT_EQ(parse_vocab_llama2c(bytes.data(), bytes.size(), "tok512").tokens.size(), 512u);
  int errors = 0;
  for (size_t cut : {size_t{0}, size_t{3}, size_t{4}, size_t{9}, size_t{13}, bytes.size() / 2, bytes.size() - 1}) {
    try {
      parse_vocab_llama2c(bytes.data(), cut, "cut");
    } catch (const Error& e) {
      ++errors;
      if (cut > 4) {
        EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
      }
    }
  }
  EXPECT_EQ(errors, 7);
  auto bad = bytes;
  bad[8] = 0x7F;  // token 0 length -> huge
  EXPECT_THROW(parse_vocab_llama2c(bad.data(), bad.size(), "bad"), Error);
  std::mt19937 rng(5);
  for (int i = 0; i < 200; ++i) {  // random corruption: an Error or a usable vocab, never a crash
    auto c = bytes;
    for (int k = 0; k < 4; ++k) c[rng() % c.size()] = static_cast<uint8_t>(rng());
    try {
      auto tok = make_tokenizer(parse_vocab_llama2c(c.data(), c.size(), "fuzz"));
      tok->decode(tok->encode("Hello world"));
    } catch (const Error&) {
    }
  }
  EXPECT_THROW(load_tokenizer("/nonexistent/tokenizer.bin"), Error);
}

// An empty file: the format probe copies no bytes (a memcpy from the null mapping was UB), then the
// llama2.c reader rejects it.
TEST(Loaders, EmptyTokenizerFileIsAnError) {
  const auto dir = anelab::test::temp_dir("emptytok");
  const std::string p = (dir / "tokenizer.bin").string();
  std::ofstream(p).close();
  try {
    load_vocab_file(p);
    ADD_FAILURE() << "an empty tokenizer file was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

TEST(Loaders, MalformedJsonVocabs) {
  for (std::string j :
       {"", "{", "[]", "{\"model\": 3}", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}",
        R"({"model": {"vocab": {"a": 0}, "merges": []}})",  // no pre-tokenizer
        R"({"model": {"vocab": {"a": "x"}, "merges": []}})", R"({"model": {"vocab": {"a": 0, "b": 0}, "merges": []}})",
        R"({"model": {"vocab": {"a": 0}, "merges": [3]}, "pre_tokenizer": {"type": "ByteLevel"}})",
        R"({"model": {"vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}})"}) {
    EXPECT_THROW(make_tokenizer(parse_vocab_hf_json(j, "t.json")), Error) << j;
  }
  EXPECT_THROW(parse_vocab_gpt2("{\"a\": 5}", "#version: 0.2\na b\n", "g"), Error);
  EXPECT_THROW(parse_vocab_gpt2("not json", "", "g"), Error);
  EXPECT_THROW(parse_vocab_gpt2("{\"a\": 0}", "#version: 0.2\n", "g"), Error);
  ANELAB_REQUIRE_DATA("gpt2/encoder.json");
  const std::string enc = read_file_text(anelab::test::data_path("gpt2/encoder.json"));
  EXPECT_THROW(make_tokenizer(parse_vocab_gpt2(enc, "#version: 0.2\nzzzqqq xx\n", "g")), Error);  // unknown merge
  EXPECT_THROW(parse_vocab_gpt2(enc.substr(0, enc.size() / 2), "a b\n", "g"), Error);             // truncated JSON
}

// ---- Chat template -------------------------------------------------------------------------------------

TEST(ChatTemplate, Qwen25MatchesJinjaByHand) {
  // Expected strings derived by reading qwen2.5_chat_template.jinja (no tools branch).
  EXPECT_EQ(apply_qwen25_chat_template(
                {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}}, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply_qwen25_chat_template({{"user", "Hi"}}, false),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(apply_qwen25_chat_template({{"user", "q"}, {"tool", "r1"}, {"tool", "r2"}, {"system", "s2"}}, false),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n"
            "<tool_response>\nr2\n</tool_response><|im_end|>\n<|im_start|>system\ns2<|im_end|>\n");
  EXPECT_THROW(apply_qwen25_chat_template({{"robot", "x"}}, false), Error);
  ANELAB_REQUIRE_DATA("qwen/qwen2.5_chat_template.jinja");
  const std::string jinja = read_file_text(anelab::test::data_path("qwen/qwen2.5_chat_template.jinja"));
  EXPECT_NE(jinja.find(kQwen25DefaultSystem), std::string::npos);  // the default system text is the file's
  ANELAB_REQUIRE_DATA("qwen/tokenizer.json");
  const Tokenizer& q = cached("qwen/tokenizer.json");
  EncodeOptions allow;
  allow.allow_special = true;
  const auto ids = q.encode(apply_qwen25_chat_template({{"user", "Hi"}}, true), allow);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), q.token_to_id("<|im_start|>")), 3);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), q.token_to_id("<|im_end|>")), 2);
}

// Expected strings derived by reading each family's Jinja (Qwen3: /work/shared/data/qwen/tokenizer_config.json;
// Llama 3: Meta-Llama-3-8B-Instruct's tokenizer_config.json; Gemma 3: gemma-3-*-it's), no tools.
TEST(ChatTemplate, Qwen3MatchesJinjaByHand) {
  const auto t = ChatTemplate::kQwen3;
  // No default system message; the generation prompt leaves thinking on.
  EXPECT_EQ(apply_chat_template(t, {{"user", "Hi"}}, true), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template(t, {{"system", "Be brief."}, {"user", "Hi"}}, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  // Reasoning before the last user query is dropped; after it, the reasoning block is kept (always for the
  // last message, even empty).
  EXPECT_EQ(apply_chat_template(t,
                                {{"user", "a"},
                                 {"assistant", "<think>\nr1\n</think>\n\nA1"},
                                 {"user", "b"},
                                 {"assistant", "<think>r2</think>A2"}},
                                false),
            "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nb<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nr2\n</think>\n\nA2<|im_end|>\n");
  EXPECT_EQ(apply_chat_template(t, {{"user", "a"}, {"assistant", "A"}}, false),
            "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nA<|im_end|>\n");
  // Tool responses group as in Qwen2.5 and do not count as the last query.
  EXPECT_EQ(apply_chat_template(
                t, {{"user", "q"}, {"assistant", "<think>x</think>call"}, {"tool", "r"}, {"assistant", "done"}}, false),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nx\n</think>\n\ncall<|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nr\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\ndone<|im_end|>\n");
  EXPECT_THROW(apply_chat_template(t, {{"robot", "x"}}, false), Error);
  ANELAB_REQUIRE_DATA("qwen/tokenizer_config.json");
  const std::string cfg = read_file_text(anelab::test::data_path("qwen/tokenizer_config.json"));
  EXPECT_EQ(cfg.find("You are Qwen"), std::string::npos);  // the template the strings above follow has no default
}

// enable_thinking false: the generation prompt is followed by an empty reasoning block, as the Jinja's
// "{%- if enable_thinking is defined and enable_thinking is false %}" writes it; history is unchanged, and
// the templates without that variable ignore it.
TEST(ChatTemplate, Qwen3ThinkingOffAddsAnEmptyThinkBlock) {
  const auto t = ChatTemplate::kQwen3;
  const std::vector<ChatMessage> m = {{"user", "a"}, {"assistant", "<think>r</think>A"}, {"user", "b"}};
  EXPECT_EQ(apply_chat_template(t, m, true, false),
            "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n<|im_start|>user\nb<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(apply_chat_template(t, m, true, true) + "<think>\n\n</think>\n\n", apply_chat_template(t, m, true, false));
  EXPECT_EQ(apply_chat_template(t, m, false, false), apply_chat_template(t, m, false, true));  // no generation prompt
  for (const auto other : {ChatTemplate::kQwen25, ChatTemplate::kLlama3, ChatTemplate::kGemma3})
    EXPECT_EQ(apply_chat_template(other, {{"user", "a"}}, true, false),
              apply_chat_template(other, {{"user", "a"}}, true));
  ANELAB_REQUIRE_DATA("qwen/tokenizer_config.json");
  const std::string cfg = read_file_text(anelab::test::data_path("qwen/tokenizer_config.json"));
  // the JSON text of the Jinja: its newlines are \n, the Python string's escapes \\n
  EXPECT_NE(cfg.find("enable_thinking is false %}\\n        {{- '<think>\\\\n\\\\n</think>\\\\n\\\\n' }}"),
            std::string::npos);
}

// Qwen3.5, by hand from its Jinja (llama.cpp models/templates/Qwen3.5-4B.jinja, Qwen3.5's chat_template): a 2-turn
// chat with thinking on and off. The first answer's reasoning (before the last user query) is dropped; the
// generation prompt opens the reasoning block (on) or writes an empty one (off); contents are trimmed.
TEST(ChatTemplate, Qwen35TwoTurnChatWithAndWithoutThinking) {
  const auto t = ChatTemplate::kQwen35;
  const std::vector<ChatMessage> m = {{"system", " Be brief.\n"},
                                      {"user", "What is 2+2?"},
                                      {"assistant", "<think>\nAdd them.\n</think>\n\n4"},
                                      {"user", " And 3+3? "}};
  const std::string history =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
      "<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n";
  EXPECT_EQ(apply_chat_template(t, m, true, true), history + "<|im_start|>assistant\n<think>\n");
  EXPECT_EQ(apply_chat_template(t, m, true, false), history + "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(apply_chat_template(t, m, false, false), history);
  // After the last user query every assistant turn carries its reasoning block, an empty one included.
  EXPECT_EQ(apply_chat_template(t, {{"user", "q"}, {"assistant", "A"}}, false),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nA<|im_end|>\n");
  EXPECT_EQ(apply_chat_template(t, {{"user", "q"}, {"assistant", "<think>r</think>A"}}, false),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\nA<|im_end|>\n");
  // What the Jinja raises: no user query, a later system message; tools are not done for it.
  EXPECT_THROW(apply_chat_template(t, {{"system", "s"}}, true), Error);
  EXPECT_THROW(apply_chat_template(t, {{"user", "a"}, {"system", "s"}}, true), Error);
  EXPECT_THROW(apply_chat_template(t, {{"user", "a"}}, true, true, {"{}"}), Error);
}

// Tools, by hand from the Qwen2.5 Jinja (../shared/data/qwen/qwen2.5_chat_template.jinja) and Qwen3's
// tokenizer_config.json: the "# Tools" system block, an assistant's tool_calls, the tool's answer.
TEST(ChatTemplate, QwenToolsMatchJinjaByHand) {
  const std::string tool = R"({"type": "function", "function": {"name": "get_weather"}})";
  const std::vector<ChatMessage> m = {{"system", "S", {}},
                                      {"user", "U", {}},
                                      {"assistant", "", {{"get_weather", R"({"city": "Paris"})"}}},
                                      {"tool", "sunny", {}}};
  const std::string tools_block =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function "
      "signatures within <tools></tools> XML tags:\n<tools>\n" +
      tool +
      "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
      "<args-json-object>}\n</tool_call><|im_end|>\n";
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  const std::string tail = "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant";
  const std::string after =
      "<|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n";
  EXPECT_EQ(apply_chat_template(ChatTemplate::kQwen25, m, true, true, {tool}),
            "<|im_start|>system\nS\n\n" + tools_block + tail + "\n" + call + after);
  EXPECT_EQ(apply_chat_template(ChatTemplate::kQwen3, m, true, true, {tool}),
            "<|im_start|>system\nS\n\n" + tools_block + tail + "\n" + call + after);
  // Without a system message: Qwen2.5 writes its default one, Qwen3 none.
  const std::vector<ChatMessage> u = {{"user", "U", {}}};
  EXPECT_EQ(apply_chat_template(ChatTemplate::kQwen25, u, false, true, {tool}),
            "<|im_start|>system\n" + std::string(kQwen25DefaultSystem) + "\n\n" + tools_block +
                "<|im_start|>user\nU<|im_end|>\n");
  EXPECT_EQ(apply_chat_template(ChatTemplate::kQwen3, u, false, true, {tool}),
            "<|im_start|>system\n" + tools_block + "<|im_start|>user\nU<|im_end|>\n");
  EXPECT_THROW(apply_chat_template(ChatTemplate::kQwen35, u, true, true, {tool}), Error);  // llama3, gemma3: below
}

TEST(ChatTemplate, Llama3MatchesJinjaByHand) {
  const auto t = ChatTemplate::kLlama3;
  EXPECT_EQ(apply_chat_template(t, {{"system", " Be brief.\n"}, {"user", "Hi"}, {"assistant", "Hello!"}}, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(apply_chat_template(t, {{"user", "Hi"}}, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
  EXPECT_THROW(apply_chat_template(t, {{"robot", "x"}}, false), Error);
  // A tool's answer is Llama 3.1's "ipython" turn.
  EXPECT_EQ(apply_chat_template(t, {{"tool", " x "}}, false),
            "<|begin_of_text|><|start_header_id|>ipython<|end_header_id|>\n\n x <|eot_id|>");
}

TEST(ChatTemplate, Gemma3MatchesJinjaByHand) {
  const auto t = ChatTemplate::kGemma3;
  EXPECT_EQ(apply_chat_template(t, {{"system", "Be helpful."}, {"user", "Hello"}}, true),
            "<bos><start_of_turn>user\nBe helpful.\n\nHello<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(apply_chat_template(t, {{"user", " Hi "}, {"assistant", "Hey\n"}, {"user", "2+2?"}}, true),
            "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHey<end_of_turn>\n"
            "<start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_THROW(apply_chat_template(t, {{"assistant", "x"}}, false), Error);            // must start with user
  EXPECT_THROW(apply_chat_template(t, {{"user", "a"}, {"user", "b"}}, false), Error);  // must alternate
}

// Tools in Llama 3 (Llama 3.1's JSON tool calling: Meta-Llama-3.1-8B-Instruct's tokenizer_config.json, its "tools in
// the first user message" branch read by hand) and Gemma 3 (anelab's form after Google's function-calling guide).
TEST(ChatTemplate, Llama3AndGemma3ToolsByHand) {
  const std::string tool = R"({"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}})";
  const std::vector<ChatMessage> m = {{"system", "S", {}},
                                      {"user", " U ", {}},
                                      {"assistant", "", {{"now", R"({"tz": "UTC"})"}}},
                                      {"tool", "12:00", {}}};
  EXPECT_EQ(
      apply_chat_template(ChatTemplate::kLlama3, m, true, true, {tool}),
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for a "
      "function call with its proper arguments that best answers the given prompt.\n\nRespond in the format "
      "{\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use "
      "variables.\n\n{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"now\",\n        "
      "\"parameters\": {\n            \"type\": \"object\"\n        }\n    }\n}\n\nU<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"now\", \"parameters\": {\"tz\": "
      "\"UTC\"}}<|eot_id|>"
      "<|start_header_id|>ipython<|end_header_id|>\n\n12:00<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(apply_chat_template(ChatTemplate::kGemma3, m, true, true, {tool}),
            "<bos><start_of_turn>user\nYou have access to the following functions. To call one, respond with nothing "
            "but a JSON object in the format {\"name\": function name, \"parameters\": dictionary of argument name and "
            "its value}.\n\n" +
                tool +
                "\n\nS\n\nU<end_of_turn>\n<start_of_turn>model\n{\"name\": \"now\", \"parameters\": {\"tz\": "
                "\"UTC\"}}<end_of_turn>\n<start_of_turn>user\n12:00<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(tool_call_form(ChatTemplate::kLlama3), ToolCallForm::kJson);
  EXPECT_EQ(tool_call_form(ChatTemplate::kGemma3), ToolCallForm::kJson);
  EXPECT_EQ(tool_call_form(ChatTemplate::kQwen3), ToolCallForm::kTagged);
  // Llama 3.1 takes one call per message and the tools need a user message; Qwen3.5 has no tools here.
  EXPECT_THROW(
      apply_chat_template(ChatTemplate::kLlama3, {{"user", "u", {}}, {"assistant", "", {{"a", "{}"}, {"b", "{}"}}}},
                          false, true, {tool}),
      Error);
  EXPECT_THROW(apply_chat_template(ChatTemplate::kLlama3, {{"system", "s", {}}}, true, true, {tool}), Error);
  EXPECT_THROW(apply_chat_template(ChatTemplate::kQwen35, {{"user", "u", {}}}, true, true, {tool}), Error);
}

TEST(ChatTemplate, ChosenByTheVocabularysControlTokens) {
  const auto with = [](const std::vector<std::string>& extra) {  // 256 byte tokens + the control tokens
    VocabData v;
    v.kind = TokenizerKind::kByteBpe;
    v.pre = "gpt2";
    for (int b = 0; b < 256; ++b) {
      std::string t;
      utf8_append(t, byte_to_unicode(static_cast<uint8_t>(b)));
      v.tokens.push_back(t), v.types.push_back(TokenType::kNormal);
    }
    for (const auto& e : extra) v.tokens.push_back(e), v.types.push_back(TokenType::kControl);
    v.add_space_prefix = false;
    return make_tokenizer(std::move(v));
  };
  const auto llama3 = with({"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"});
  const auto gemma3 = with({"<bos>", "<start_of_turn>", "<end_of_turn>"});
  const auto qwen3 = with({"<|im_start|>", "<|im_end|>", "<think>", "</think>"});
  const auto qwen25 = with({"<|im_start|>", "<|im_end|>"});
  const auto base = with({});
  EXPECT_EQ(chat_template_for(*llama3, "auto"), ChatTemplate::kLlama3);
  EXPECT_EQ(chat_template_for(*gemma3, "auto"), ChatTemplate::kGemma3);
  EXPECT_EQ(chat_template_for(*qwen3, "auto"), ChatTemplate::kQwen3);
  EXPECT_EQ(chat_template_for(*qwen3, "auto", "qwen35"), ChatTemplate::kQwen35);  // the same tokens, by the arch
  EXPECT_EQ(chat_template_for(*qwen3, "qwen3.5"), ChatTemplate::kQwen35);
  EXPECT_EQ(chat_template_for(*qwen25, "auto", "qwen35"), ChatTemplate::kQwen25);  // no <think>: not Qwen3.5's
  EXPECT_EQ(chat_template_for(*qwen25, "auto"), ChatTemplate::kQwen25);
  EXPECT_EQ(chat_template_for(*base, "auto"), ChatTemplate::kNone);
  EXPECT_EQ(chat_template_for(*qwen3, "qwen2.5"), ChatTemplate::kQwen25);  // named: any family whose tokens exist
  EXPECT_EQ(chat_template_for(*llama3, "none"), ChatTemplate::kNone);
  try {
    chat_template_for(*qwen25, "gemma3");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[chat] --chat-template gemma3: the vocabulary"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(chat_template_for(*llama3, "llama2"), Error);
  EXPECT_EQ(chat_stop_ids(ChatTemplate::kLlama3, *llama3), std::vector<int32_t>{llama3->token_to_id("<|eot_id|>")});
  EXPECT_EQ(chat_stop_ids(ChatTemplate::kGemma3, *gemma3), std::vector<int32_t>{gemma3->token_to_id("<end_of_turn>")});
  EXPECT_EQ(chat_stop_ids(ChatTemplate::kQwen3, *qwen3), std::vector<int32_t>{qwen3->token_to_id("<|im_end|>")});
  EXPECT_STREQ(chat_template_name(ChatTemplate::kQwen3), "qwen3");
}

// ---- Token files (anelab tokenize) ---------------------------------------------------------------------

TEST(TokenFile, ParagraphSplitting) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(split_paragraphs("a\n\nb\n\n"), (V{"a", "b"}));
  EXPECT_EQ(split_paragraphs("a \nx\n\n\nb"), (V{"a \nx", "\nb"}));
  EXPECT_EQ(split_paragraphs("a\n\n\n\nb\n"), (V{"a", "", "b\n"}));
  EXPECT_TRUE(split_paragraphs("").empty());
}

TEST(TokenFile, WriteReadAndSidecar) {
  ANELAB_REQUIRE_DATA("llama2c/tok512.bin");
  ANELAB_REQUIRE_DATA("qwen/tokenizer.json");
  const auto dir = anelab::test::temp_dir("tokfile");
  const std::string text = "One day.\n\nTwo days, 🦙.\n\n";
  for (const char* t : {"llama2c/tok512.bin", "qwen/tokenizer.json"}) {
    const Tokenizer& tok = cached(t);
    const std::string out = (dir / "out.bin").string();
    const auto info = write_token_file(tok, text, out, t);
    const auto ids = read_token_file(out);
    ASSERT_EQ(static_cast<int64_t>(ids.size()), info.n_tokens);
    EXPECT_EQ(info.n_documents, 2);
    const int32_t sep = document_separator(tok);
    ASSERT_GE(sep, 0);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), sep), 2);
    EXPECT_EQ(ids.front(), sep);
    std::vector<int32_t> want;
    for (auto p : {"One day.", "Two days, 🦙."}) {
      auto e = tok.encode(p);
      want.push_back(sep);
      want.insert(want.end(), e.begin(), e.end());
    }
    EXPECT_EQ(ids, want);
    const auto meta = nlohmann::json::parse(read_file_text(out + ".json"));
    EXPECT_EQ(meta["format"], "anelab-tokens");
    EXPECT_EQ(meta["dtype"], tok.vocab_size() > 65536 ? "uint32" : "uint16");
    EXPECT_EQ(std::filesystem::file_size(out), ids.size() * (tok.vocab_size() > 65536 ? 4 : 2));
  }
  // Corrupt sidecar / size mismatch are errors.
  const std::string out = (dir / "out.bin").string();
  write_file_atomic(out + ".json", std::string("{\"format\":\"x\"}"));
  EXPECT_THROW(read_token_file(out), Error);
}

TEST(TokenFile, IdLinesRoundTripAndErrors) {
  ANELAB_REQUIRE_DATA("gpt2");
  const Tokenizer& g = cached("gpt2");
  const std::string text = "Hello there.\n\n\n\nSecond  para \nline.\n\n";
  const std::string lines = encode_id_lines(g, text);
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 3);
  EXPECT_EQ(decode_id_lines(g, lines), text);
  EXPECT_THROW(decode_id_lines(g, "1 2 x\n"), Error);
  EXPECT_THROW(decode_id_lines(g, "99999999\n"), Error);
}

}  // namespace
}  // namespace anelab::tok
