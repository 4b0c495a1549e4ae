// The `anelab` binary's first-hour behaviour: unknown commands and options name the closest
// match; llama.cpp aliases (-m, -n, -c); numeric checks (-t -1); --backend choices; progress lines on
// stderr (quiet with -q) and the CPU path by default; the first prompt token of a byte-level vocabulary
// echoed; base models refuse chat with a hint; a vocabulary mismatch named as such; a hint when generate
// waits on a terminal; `train --help` grouped. Models are small random files written here.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
// forkpty: <pty.h> on glibc, <util.h> on macOS; Zig's macOS headers (the CI cross build) have neither.
#if __has_include(<pty.h>)
#include <pty.h>
#define ANELAB_TEST_FORKPTY 1
#elif __has_include(<util.h>)
#include <util.h>
#define ANELAB_TEST_FORKPTY 1
#else
#define ANELAB_TEST_FORKPTY 0
#endif
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "framework/core/file.h"
#include "models/formats/checkpoint_file.h"
#include "tests/common/test_data.h"
#include "tests/infer/test_cli_helpers.h"

namespace anelab {
namespace {

namespace fs = std::filesystem;
using test::anelab;
using test::Out;
const std::string kBin = std::string(ANELAB_BINARY_DIR) + "/bin/anelab";

class InferCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(test::temp_dir("infer_cli"));
    test::write_byte_vocab_model((*dir_ / "base.anelab").string(), test::byte_vocab(512));
    test::write_byte_vocab_model((*dir_ / "padded.anelab").string(), test::byte_vocab(512), 4096);
    tok::VocabData llama3 = test::byte_vocab(512);  // Llama 3's control tokens in place of four extra ones
    const char* controls[] = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    for (int i = 0; i < 4; ++i) llama3.tokens[size_t(257 + i)] = controls[i];
    test::write_byte_vocab_model((*dir_ / "llama3.anelab").string(), llama3);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string model(const char* name = "base.anelab") { return (*dir_ / name).string(); }
  static inline fs::path* dir_ = nullptr;
};

TEST_F(InferCli, UnknownCommandsAndOptionsNameTheClosestMatch) {
  Out r = anelab("trian");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("unknown command 'trian'; did you mean 'train'?"), std::string::npos) << r.err;
  r = anelab("infer genrate --model x");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("unknown command 'genrate' for 'anelab infer'; did you mean 'generate'?"), std::string::npos)
      << r.err;
  r = anelab("infer generate --model " + model() + " --tempreature 0");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("unknown option '--tempreature' for 'anelab infer generate'; did you mean '--temperature'?"),
            std::string::npos)
      << r.err;
  r = anelab("xyzzy");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("unknown command 'xyzzy'"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("did you mean"), std::string::npos) << r.err;  // nothing is close
  // An option's value in the next word is not a command ("demo --steps 3" used to be refused as command '3').
  r = anelab("demo --steps 3 --batch-size 0 --out " + (*dir_ / "demo").string());
  EXPECT_NE(r.rc, 0);
  EXPECT_EQ(r.err.find("unknown command"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--batch-size 0"), std::string::npos) << r.err;
  r = anelab("demo -h --steps 3 kernl");
  EXPECT_NE(r.err.find("unknown command 'kernl' for 'anelab demo'; did you mean 'kernel'?"), std::string::npos)
      << r.err;
}

// stdout = the prompt (first token included: the byte-level vocabulary has no BOS) + 0 new tokens.
TEST_F(InferCli, LlamaCppAliasesAndTheFirstPromptTokenEchoed) {
  const Out r = anelab("infer generate -m " + model() + " -n 0 -c 64 --temp 0 -q --prompt 'Hello, my name is'");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "Hello, my name is\n");
}

TEST_F(InferCli, NumericAndBackendChoicesAreChecked) {
  Out r = anelab("infer generate -m " + model() + " --temp -1 --prompt a");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.err.find("--temperature"), std::string::npos) << r.err;
  r = anelab("infer generate -m " + model() + " --top-p 1.5 --prompt a");
  EXPECT_NE(r.rc, 0) << r.out;
  r = anelab("infer generate -m " + model() + " --threads 0 --prompt a");
  EXPECT_NE(r.rc, 0) << r.out;
  r = anelab("infer generate -m " + model() + " --backend gpu --prompt a");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.err.find("auto, cpu, emulator, ane"), std::string::npos) << r.err;
  r = anelab("serve -m " + model() + " --backend gpu");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.err.find("auto"), std::string::npos) << r.err;
}

// Every numeric option of infer / serve takes only its range (infer/params_check.h for the sampling ones,
// shared with the server's request parser): each value below was once accepted (nan, negatives, zero
// penalties, ports past 65535). Each must fail with the option named, before any model is loaded.
TEST_F(InferCli, OutOfRangeValuesAreRefusedNamingTheOption) {
  const std::pair<std::string, std::string> gen[] = {{"--temp nan", "--temperature"},
                                                     {"--temp -1", "--temperature"},
                                                     {"--temp inf", "--temperature"},
                                                     {"--top-p 5", "--top-p"},
                                                     {"--top-p 0", "--top-p"},
                                                     {"--top-k -3", "--top-k"},
                                                     {"--repeat-penalty 0", "--repeat-penalty"},
                                                     {"--repeat-penalty nan", "--repeat-penalty"},
                                                     {"--min-p -1", "--min-p"},
                                                     {"--max-tokens -5", "--max-tokens"},
                                                     {"--threads 0", "--threads"},
                                                     {"--ctx -1", "--ctx"}};
  for (const auto& [opt, name] : gen) {
    const Out r = anelab("infer generate -m " + model() + " -q " + opt + " --prompt a", 60);
    EXPECT_NE(r.rc, 0) << opt << ": " << r.out;
    EXPECT_NE(r.err.find(name), std::string::npos) << opt << ": " << r.err;
    EXPECT_NE(r.err.find("must be"), std::string::npos) << opt << ": " << r.err;
  }
  const std::pair<std::string, std::string> srv[] = {{"--port 70000", "--port"},
                                                     {"--port -1", "--port"},
                                                     {"--threads 0", "--threads"},
                                                     {"--ctx -1", "--ctx"},
                                                     {"--shutdown-grace nan", "--shutdown-grace"},
                                                     {"--shutdown-grace -1", "--shutdown-grace"},
                                                     {"--parallel 0", "--parallel"},
                                                     {"--max-connections 0", "--max-connections"},
                                                     {"--request-timeout 0", "--request-timeout"},
                                                     {"--max-body 0", "--max-body"}};
  for (const auto& [opt, name] : srv) {
    const Out r = anelab("serve -m " + model() + " -q --port 0 " + opt, 30);
    EXPECT_NE(r.rc, 0) << opt << ": " << r.out;
    EXPECT_NE(r.err.find(name), std::string::npos) << opt << ": " << r.err;
    EXPECT_EQ(r.out.find("listening"), std::string::npos) << opt << ": " << r.out;
  }
}

// `infer bench` with more generated tokens than the context holds says so in one line (it used to fail with
// std::vector's "larger than max_size()").
TEST_F(InferCli, BenchRefusesAGenLengthBeyondTheContext) {
  Out r = anelab("infer bench -m " + model() + " -q --prompt-len 4 --gen-len 3000 --ctx 64", 60);
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.err.find("--gen-len 3000 needs 3002 positions"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the context has 64"), std::string::npos) << r.err;
  r = anelab("infer bench -m " + model() + " -q --prompt-len 4 --gen-len 8 --ctx 64", 120);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("decode tg8"), std::string::npos) << r.out;
}

// --kv-type takes f32 or f16 (--mmap auto, on or off) on every command that builds an engine; anything else
// is refused in one line naming the option before a model is loaded. bench prints the cache's type and size
// (stories260k's shape: 2 * 5 layers * kv_dim 32 * 2 bytes = 640 bytes per position).
TEST_F(InferCli, KvTypeIsCheckedAndBenchPrintsTheCache) {
  for (const std::string& cmd : {"infer generate -m " + model() + " --prompt a", "infer bench -m " + model(),
                                 "serve -m " + model() + " --port 0", "perplexity -m " + model() + " --text x"}) {
    const Out r = anelab(cmd + " -q --kv-type f8", 30);
    EXPECT_NE(r.rc, 0) << cmd << ": " << r.out;
    EXPECT_NE(r.err.find("--kv-type: f8 not in {f32,f16}"), std::string::npos) << cmd << ": " << r.err;
    EXPECT_EQ(r.out.find("listening"), std::string::npos) << cmd << ": " << r.out;
    const Out m = anelab(cmd + " -q --mmap sometimes", 30);  // --mmap: the same commands, the same kind of error
    EXPECT_NE(m.rc, 0) << cmd << ": " << m.out;
    EXPECT_NE(m.err.find("--mmap: sometimes not in {auto,on,off}"), std::string::npos) << cmd << ": " << m.err;
  }
  Out r = anelab("infer bench -m " + model() + " -q --prompt-len 8 --gen-len 4 --ctx 64 --kv-type f16", 120);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("KV cache f16: 0.6 KiB per position, 0.0 MiB at the 13 positions used"), std::string::npos)
      << r.out;
  r = anelab("infer generate -m " + model() + " -q -n 4 --kv-type f16 --prompt a", 120);
  EXPECT_EQ(r.rc, 0) << r.err;
}

// An unwritable --port-file fails the start naming the path (it used to be ignored while the server ran);
// a non-loopback --host without an api key warns in one line first.
TEST_F(InferCli, ServePortFileAndExposedHostWarning) {
  const std::string bad = (*dir_ / "no-such-dir" / "port").string();
  Out r = anelab("serve -m " + model() + " -q --port 0 --host 0.0.0.0 --port-file " + bad, 30);
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.err.find("cannot write --port-file " + bad), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("listening"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("warning: --host 0.0.0.0 without an api key"), std::string::npos) << r.err;
  r = anelab("serve -m " + model() + " -q --port 0 --host 0.0.0.0 --api-key k --port-file " + bad, 30);
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
  r = anelab("serve -m " + model() + " -q --port 0 --port-file " + bad, 30);
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;  // loopback: nothing to warn about
}

// convert --tokenizer with another model's vocabulary (llama2.c's 32000 tokens for a 512-token model).
TEST_F(InferCli, ConvertRefusesATokenizerOfAnotherSize) {
  ANELAB_REQUIRE_DATA("llama2c/tokenizer.bin");
  const std::string out = (*dir_ / "converted.anelab").string();
  const Out r = anelab("convert " + model() + " " + out + " --tokenizer " + test::data_path("llama2c/tokenizer.bin"));
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.err.find("32000"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("512"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("vocabulary mismatch"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

// `convert --dtype q4_k_m` writes llama-quantize's mix: on stories15m's shape (6 layers, width 288, hidden 768)
// ffn_down (768-wide rows) is Q6_K in layers 2 and 5 (use_more_bits) and Q4_K elsewhere, the 288-wide rows fall
// back as llama-quantize's do (Q4_K -> Q5_0, Q6_K -> Q8_0); q5_k_m the same with Q5_K (falling back to Q5_1); an
// unknown mix is refused naming the value.
TEST_F(InferCli, ConvertQuantizesWithTheQ4_K_MMix) {
  for (const auto& [mix, want] :
       {std::pair<std::string, std::string>{"q4_k_m", "(13 fp32, 4 q4_k, 34 q5_0, 2 q6_k, 3 q8_0)"},
        {"q5_k_m", "(13 fp32, 34 q5_1, 4 q5_k, 2 q6_k, 3 q8_0)"}}) {
    const std::string out = (*dir_ / (mix + ".gguf")).string();
    Out r = anelab("convert --random stories15m " + out + " --dtype " + mix);
    ASSERT_EQ(r.rc, 0) << r.err;
    r = anelab("info " + out);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("tensors: 56 " + want), std::string::npos) << r.out;
  }
  Out r = anelab("convert " + model() + " " + (*dir_ / "bad.gguf").string() + " --dtype q3_k_m");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("q3_k_m"), std::string::npos) << r.err;
}

// `convert --palettize lut4|lut6 [--lut-group G]` (issue 39): an anelab file with palettes that `--ane-weights lut4`
// runs on; palettes in another format, --lut-group alone and a bad value are refused in one line.
TEST_F(InferCli, ConvertPalettizesForTheLutWeights) {
  const std::string out = (*dir_ / "lut4.anelab").string();
  Out r = anelab("convert " + model() + " " + out + " --palettize lut4 --lut-group 16");
  ASSERT_EQ(r.rc, 0) << r.err;
  r = anelab("infer generate -m " + out + " -i hello -n 4 --temp 0 --backend emulator --ane-weights lut4");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("lut4 weights"), std::string::npos) << r.err;
  r = anelab("infer generate -m " + model() + " -i hello -n 4 --backend emulator --ane-weights lut6");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--palettize lut6"), std::string::npos) << r.err;
  r = anelab("convert " + model() + " " + (*dir_ / "lut.gguf").string() + " --palettize lut6");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("palettes are stored in anelab files only"), std::string::npos) << r.err;
  r = anelab("convert " + model() + " " + (*dir_ / "g.anelab").string() + " --lut-group 16");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--lut-group goes with --palettize"), std::string::npos) << r.err;
  r = anelab("convert " + model() + " " + (*dir_ / "g.anelab").string() + " --palettize lut5");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("lut5"), std::string::npos) << r.err;
}

// `convert --random PRESET --shape JSON`: the preset with those config fields replaced (the GGUF export
// notes where llama.cpp computes a gemma3 otherwise); a field that is not one, bad JSON, a value out of range
// or --shape without --random are refused in one line.
TEST_F(InferCli, ConvertRandomShapeOverridesThePreset) {
  const std::string out = (*dir_ / "small_gemma3.gguf").string();
  Out r = anelab("convert --random gemma3-1b " + out +
                 R"( --shape '{"dim": 64, "hidden_dim": 128, "n_layers": 2, "head_dim": 16, "vocab_size": 300}')");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("note: gemma3: llama.cpp scales the embeddings by sqrt(dim) = 8, this model by 34"),
            std::string::npos)
      << r.err;  // the preset's bf16 sqrt(1152) kept
  EXPECT_NE(r.err.find("note: gemma3: llama.cpp scales attention scores by 0.25, this model by 0.0625"),
            std::string::npos)
      << r.err;
  r = anelab("info " + out);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("tok_embeddings   [300, 64]"), std::string::npos) << r.out;
  const struct {
    std::string args, want;
  } bad[] = {
      {R"(--random gemma3-1b x.anelab --shape '{"width": 64}')", "[cli] --shape: 'width' is not a model config field"},
      {R"(--random gemma3-1b x.anelab --shape '{"dim": 64')", "[cli] --shape is not JSON"},
      {R"(--random gemma3-1b x.anelab --shape '[1]')", "[cli] --shape must be a JSON object"},
      {R"(--random gemma3-1b x.anelab --shape '{"n_layers": -1}')", "n_layers"},
      {R"(a.anelab b.gguf --shape '{"dim": 64}')", "[cli] --shape goes with --random PRESET"},
  };
  for (const auto& c : bad) {
    r = anelab("convert " + c.args);
    EXPECT_NE(r.rc, 0) << c.args;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// Without --backend the prefill takes the CPU path here (no ANE); progress lines on stderr, none with -q.
TEST_F(InferCli, DefaultBackendIsCpuWithProgressLines) {
  Out r = anelab("infer generate -m " + model() + " -n 2 --prompt a");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("loading " + model()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("prefill backend cpu"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tokens in "), std::string::npos) << r.err;  // the stats line stays
  r = anelab("infer generate -m " + model() + " -n 2 -q --prompt a");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("loading"), std::string::npos) << r.err;
  // The emulator only when asked: then its kernel compiles are announced.
  r = anelab("infer generate -m " + model() + " -n 1 --backend emulator --prompt a");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("compiling"), std::string::npos) << r.err;
}

// --ane-weights reaches the MIL prefill: the compile line names the weights, w8a8 calibrates first.
TEST_F(InferCli, AneWeightsChooseTheKernelsWeights) {
  Out r = anelab("infer generate -m " + model() + " -n 1 --backend emulator --ane-weights w8a8 --prompt a");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("w8a8: calibrating activation scales"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(w8a8 weights)"), std::string::npos) << r.err;
  r = anelab("infer generate -m " + model() + " -n 1 --backend emulator --device m1 --ane-weights auto --prompt a");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("(int8 weights)"), std::string::npos) << r.err;
  r = anelab("infer generate -m " + model() + " --ane-weights int4 --prompt a");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.err.find("--ane-weights"), std::string::npos) << r.err;
}

// Issue 40 item 1: the commands that run a model ask the chip for its profile by default.
TEST_F(InferCli, RunningCommandsDefaultToDeviceAuto) {
  for (const char* cmd : {"infer generate", "infer bench", "serve", "perplexity"}) {
    const Out r = anelab(std::string(cmd) + " --help");
    ASSERT_EQ(r.rc, 0) << cmd << ": " << r.err;
    EXPECT_NE(r.out.find("--device TEXT=auto"), std::string::npos) << cmd << "\n" << r.out;
  }
}

TEST_F(InferCli, BaseModelRefusesChatWithAHint) {
  const Out r = anelab("infer chat -m " + model());
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.err.find("has no chat template"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("anelab infer generate"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("> "), std::string::npos) << "the chat loop started: " << r.out;
}

// The template follows the vocabulary's control tokens; a family whose tokens are missing is refused.
TEST_F(InferCli, ChatPicksTheTemplateOfTheVocabulary) {
  Out r = anelab("infer chat -m " + model("llama3.anelab"));  // stdin is /dev/null: the loop ends at once
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("template llama3"), std::string::npos) << r.err;
  r = anelab("infer chat -m " + model("llama3.anelab") + " --chat-template gemma3");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("[chat] --chat-template gemma3: the vocabulary"), std::string::npos) << r.err;
}

TEST_F(InferCli, VocabularyMismatchIsNamed) {
  const Out r = anelab("infer generate -m " + model("padded.anelab") + " -n 8 --temp 0 --prompt a");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.err.find("vocabulary mismatch"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("out of range"), std::string::npos) << r.err;
}

// generate without --prompt reads stdin; on a terminal it says so instead of waiting silently.
TEST_F(InferCli, HintWhenGenerateWaitsOnATerminal) {
#if !ANELAB_TEST_FORKPTY
  GTEST_SKIP() << "no forkpty in this build's C library headers (<pty.h> / <util.h>)";
#else
  int master = -1;
  const std::string m = model();
  const pid_t pid = forkpty(&master, nullptr, nullptr, nullptr);
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl(kBin.c_str(), kBin.c_str(), "infer", "generate", "-m", m.c_str(), "-n", "1", "-q",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  std::string seen;
  const auto t0 = std::chrono::steady_clock::now();
  char buf[512];
  while (seen.find("until EOF") == std::string::npos &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    fd_set fds;
    FD_ZERO(&fds);
    FD_SET(master, &fds);
    timeval tv{0, 100000};
    if (select(master + 1, &fds, nullptr, nullptr, &tv) > 0) {
      const ssize_t n = ::read(master, buf, sizeof buf);
      if (n <= 0) break;
      seen.append(buf, static_cast<size_t>(n));
    }
  }
  EXPECT_NE(seen.find("reading the prompt from the terminal until EOF"), std::string::npos) << seen;
  (void)!::write(master, "a\n\x04", 3);  // a prompt, then EOF
  int st = 0;
  for (int i = 0; i < 200 && waitpid(pid, &st, WNOHANG) == 0; ++i) {
    while (true) {  // drain so the child never blocks on a full pty
      fd_set fds;
      FD_ZERO(&fds);
      FD_SET(master, &fds);
      timeval tv{0, 50000};
      if (select(master + 1, &fds, nullptr, nullptr, &tv) <= 0 || ::read(master, buf, sizeof buf) <= 0) break;
    }
  }
  if (waitpid(pid, &st, WNOHANG) == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
  }
  ::close(master);
#endif
}

TEST_F(InferCli, TrainHelpIsGroupedWithOneDefaultStyle) {
  const Out r = anelab("train --help");
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* g : {"Model and data:", "Loop:", "Optimizer:", "Execution:", "Evaluation and output:"})
    EXPECT_NE(r.out.find(g), std::string::npos) << g << "\n" << r.out;
  EXPECT_EQ(r.out.find("[default:"), std::string::npos) << r.out;  // CLI11's own default display, as elsewhere
  EXPECT_NE(r.out.find("--batch-size INT"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--data PATH"), std::string::npos) << r.out;
}

// Issue 33 item 4: the short flags mean what they mean in llama.cpp's llama-completion / llama-cli (-t
// threads, -p prompt, -f prompt file, --temp, a positional prompt); `-t 2` used to sample at temperature 2.
TEST_F(InferCli, LlamaCppFlagsMeanWhatTheyMeanThere) {
  const std::string m = " -m " + model() + " -q -n 8 -c 64 --backend cpu";
  const Out want = anelab("infer generate" + m + " --threads 2 --temperature 0 --prompt 'Hello, my name is'");
  ASSERT_EQ(want.rc, 0) << want.err;
  ASSERT_GT(want.out.size(), std::string("Hello, my name is").size()) << want.out;
  // llama-completion's own command line (model, prompt, -n, -t, --temp, -c, -s, --top-k, --top-p), unchanged.
  Out r = anelab("infer generate -m " + model() +
                 " -p 'Hello, my name is' -n 8 -t 2 --temp 0 -c 64 -s 1 --top-k 40 "
                 "--top-p 0.95 --repeat-penalty 1 -q --backend cpu");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, want.out);
  r = anelab("infer generate" + m + " -t 2 --temp 0 'Hello, my name is'");  // positional prompt
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, want.out);
  r = anelab("infer generate" + m + " -t 1 --temp 0 -i 'Hello, my name is'");  // run.c's -i stays
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, want.out);
  const std::string pf = (*dir_ / "prompt.txt").string();
  write_file_atomic(pf, "Hello, my name is");
  r = anelab("infer generate" + m + " --temp 0 -f " + pf);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, want.out);
  // -t is threads: 0 threads is refused naming --threads (it was temperature 0, accepted).
  r = anelab("infer generate" + m + " -t 0 --temp 0 -p a");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.err.find("--threads"), std::string::npos) << r.err;
  r = anelab("infer generate" + m + " --temp 0 -p a 'b'");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.err.find("more than one prompt"), std::string::npos) << r.err;
}

// Issue 33 item 2: a run's tokenizer file (tokenizer.anetok, the trainer's copy of the tokenizer it used)
// is a tokenizer wherever one is taken: --tokenizer of infer, tokenize, and a directory holding it.
TEST_F(InferCli, RunTokenizerFileIsATokenizer) {
  const fs::path d = *dir_ / "anetok";
  fs::create_directories(d);
  models::save_run_tokenizer(test::byte_vocab(512), (d / "tokenizer.anetok").string());
  Out r = anelab("convert " + model() + " " + (d / "m.bin").string());  // llama2.c: no tokenizer inside
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string gen = " -q -n 8 -c 64 --temp 0 --backend cpu -p 'Hello, my name is'";
  const Out want = anelab("infer generate -m " + model() + gen);
  ASSERT_EQ(want.rc, 0) << want.err;
  for (const fs::path& t : {d / "tokenizer.anetok", d}) {
    r = anelab("infer generate -m " + (d / "m.bin").string() + " --tokenizer " + t.string() + gen);
    EXPECT_EQ(r.rc, 0) << t << ": " << r.err;
    EXPECT_EQ(r.out, want.out) << t;
  }
  write_file_atomic((d / "in.txt").string(), "Hello, my name is\n");
  r = anelab("tokenize --tokenizer " + (d / "tokenizer.anetok").string() + " --ids " + (d / "in.txt").string() + " " +
             (d / "ids.txt").string());
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(read_file_text((d / "ids.txt").string()).empty());
}

// Issue 33 item 3: a token file says which tokenizer made it; training a model of another vocabulary on it
// stops before the first step, naming both sizes (512-token data on a 32000-token preset used to train).
TEST_F(InferCli, TrainingRefusesDataOfAnotherVocabulary) {
  const fs::path d = *dir_ / "vocab_mismatch";
  fs::create_directories(d);
  models::save_run_tokenizer(test::byte_vocab(512), (d / "tok512.anetok").string());
  std::string text;
  for (int i = 0; i < 60; ++i) text += "Once upon a time there was a little cat who liked to play.\n\n";
  write_file_atomic((d / "corpus.txt").string(), text);
  Out r = anelab("tokenize --tokenizer " + (d / "tok512.anetok").string() + " " + (d / "corpus.txt").string() + " " +
                 (d / "ts512.bin").string());
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string common = " --data " + (d / "ts512.bin").string() +
                             " --strategy cpu --steps 1 --batch-size 1 --seq-len 32 --quiet --run-dir ";
  r = anelab("train --preset stories15m" + common + (d / "run15m").string());
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.err.find("vocabulary mismatch"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("512 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("vocab_size 32000"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d / "run15m" / "events.jsonl")) << "a step ran";
  // --init of a model whose own tokenizer differs in size (4096 rows, the byte vocabulary of 512 inside: the
  // model check names it first), and a model of the data's vocabulary trains.
  r = anelab("train --init " + model("padded.anelab") + common + (d / "runpad").string());
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.err.find("vocabulary mismatch"), std::string::npos) << r.err;
  r = anelab("train --init " + model() + common + (d / "run512").string());
  EXPECT_EQ(r.rc, 0) << r.err;
  // Item 8: the resolved config writes floats as typed (lr = 0.0003, not 0.00029999999999999997).
  const std::string toml = read_file_text((d / "run512" / "config.toml").string());
  EXPECT_NE(toml.find("\nlr = 0.0003\n"), std::string::npos) << toml;
}

// Issue 33 item 6: limits said out loud: a context above the trained one is capped with a warning, and -n
// past the context says where generation stopped and why.
TEST_F(InferCli, LimitsAreSaidOutLoud) {
  Out r = anelab("infer generate -m " + model() + " -c 16777216 -n 2 --temp 0 -p a");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("warning: --ctx 16777216 is above the model's trained context"), std::string::npos) << r.err;
  r = anelab("infer generate -m " + model() + " -c 16 -n 100 --temp 0 --ignore-eos -p a");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("at position 16: the context of 16 positions is full"), std::string::npos) << r.err;
  r = anelab("infer generate -m " + model() + " -q -c 16 -n 100 --temp 0 --ignore-eos -p a");
  EXPECT_EQ(r.err, "");
}

// Issue 33 item 8: serve checks its port before it loads the model (a taken port used to be found only after
// the load: here the model does not even exist, and the port is what the error names).
TEST_F(InferCli, ServeChecksThePortBeforeLoadingTheModel) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  const Out r = anelab("serve -m " + (*dir_ / "missing.anelab").string() + " --port " + std::to_string(port), 30);
  ::close(fd);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.err.find("port " + std::to_string(port)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("in use"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("missing.anelab"), std::string::npos) << "the model was loaded first: " << r.err;
}

// Issue 33 item 8: bare `anelab` prints the help; integer bounds print as integers.
TEST_F(InferCli, SmallEdges) {
  Out r = anelab("");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("demo"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("train"), std::string::npos) << r.out;
  r = anelab("infer generate -m " + model() + " --ctx -1 -p a");
  EXPECT_EQ(r.rc, 2) << r.out;  // a usage error
  EXPECT_NE(r.err.find("[0, 16777216]"), std::string::npos) << r.err;
  r = anelab("infer generate -m " + (*dir_ / "missing.anelab").string() + " -p a");
  EXPECT_EQ(r.rc, 1) << r.err;  // a failure
  // -q: nothing on stderr, the speed line included.
  r = anelab("infer generate -m " + model() + " -q -n 4 --temp 0 -p a");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
}

// Issue 33 item 8: the compile lines of the MIL prefill (stderr) never land inside the echoed prompt (stdout):
// with both streams in one file, as on a terminal, every "[infer]" line starts a line.
TEST_F(InferCli, CompileNoteIsNotInsideTheEchoedPrompt) {
  const std::string both = (*dir_ / "both.txt").string();
  const std::string cmd = kBin + " infer generate -m " + model() +
                          " --backend emulator -n 2 --temp 0 -p 'Once upon a time' < /dev/null > " + both + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file_text(both);
  const std::string t = read_file_text(both);
  ASSERT_NE(t.find("[infer] compiling"), std::string::npos) << t;
  ASSERT_NE(t.find("Once upon a time"), std::string::npos) << t;
  for (size_t at = t.find("[infer]"); at != std::string::npos; at = t.find("[infer]", at + 1))
    EXPECT_TRUE(at == 0 || t[at - 1] == '\n') << "a note inside a line at byte " << at << ":\n" << t;
}

// infer generate --json-schema / --grammar-file: the continuation after the echoed prompt is a sentence of the
// grammar (stories260K writes stories by itself); a keyword the grammar cannot enforce is one line, exit 1.
TEST(InferCliGrammar, GenerateWithJsonSchemaAndGrammar) {
  ANELAB_REQUIRE_DATA("llama2c/stories260K.bin");
  ANELAB_REQUIRE_DATA("llama2c/tok512.bin");
  const std::string model = "--backend cpu --model " + test::data_path("llama2c/stories260K.bin") + " --tokenizer " +
                            test::data_path("llama2c/tok512.bin") + " -q --prompt 'Once upon a time' -n 120 ";
  const auto r = test::anelab("infer generate " + model +
                              "--temp 0.8 -s 5 -j '{\"type\": \"object\", \"properties\": {\"name\": {\"type\": "
                              "\"string\", \"maxLength\": 10}, "
                              "\"age\": {\"type\": \"integer\"}}, \"required\": [\"name\", \"age\"]}'");
  ASSERT_EQ(r.rc, 0) << r.err;
  ASSERT_EQ(r.out.rfind("Once upon a time", 0), 0u) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(16), nullptr, false);  // the echo, then the JSON and "\n"
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_TRUE(j["name"].is_string() && j["age"].is_number_integer()) << r.out;
  const std::string g = (test::temp_dir("cli_grammar") / "yes.gbnf").string();
  write_file_atomic(g, "root ::= (\" yes\" | \" no\") \"!\"\n");
  const auto y = test::anelab("infer generate " + model + "--temp 1 -s 2 --grammar-file " + g);
  ASSERT_EQ(y.rc, 0) << y.err;
  EXPECT_TRUE(y.out == "Once upon a time yes!\n" || y.out == "Once upon a time no!\n") << y.out;
  const auto bad = test::anelab("infer generate " + model + "-j '{\"type\": \"string\", \"pattern\": \"a\"}'");
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE(bad.err.find("keyword 'pattern' is not supported"), std::string::npos) << bad.err;
}

// --model-draft: a draft of another vocabulary (another vocab_size, or other token texts) is refused in one line naming
// both files; the model as its own draft gives plain decoding's greedy ids with the drafts counted.
TEST_F(InferCli, ModelDraftOfAnotherVocabularyIsRefusedNamingBothFiles) {
  const std::string run = "infer generate --backend cpu -q --temp 0 -n 12 --print-ids --prompt-ids '72 101 108' -m " +
                          model() + " --model-draft ";
  test::write_byte_vocab_model(model("v600.anelab"), test::byte_vocab(512), 600);  // the same tokens, 600 rows
  for (const char* other : {"v600.anelab", "llama3.anelab"}) {
    const Out r = anelab(run + model(other));
    EXPECT_NE(r.rc, 0) << other;
    EXPECT_NE(r.err.find("[infer] the draft model " + model(other) + " does not share the vocabulary of " + model()),
              std::string::npos)
        << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  const Out plain =
      anelab("infer generate --backend cpu -q --temp 0 -n 12 --print-ids --prompt-ids '72 101 108' -m " + model());
  const Out self = anelab("infer generate --backend cpu --temp 0 -n 12 --print-ids --prompt-ids '72 101 108' -m " +
                          model() + " --model-draft " + model() + " --draft-max 3");
  ASSERT_EQ(plain.rc, 0) << plain.err;
  ASSERT_EQ(self.rc, 0) << self.err;
  EXPECT_EQ(self.out, plain.out);
  EXPECT_NE(self.err.find("speculative (draft model): "), std::string::npos) << self.err;
}

}  // namespace
}  // namespace anelab
