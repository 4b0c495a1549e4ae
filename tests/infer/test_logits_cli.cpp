// The checking interface of the `anelab` binary against the Hugging Face fixtures (tests/fixtures/hf):
// `infer logits --ids ... --out F.npy` on the CPU path (fp32) and the emulator's MIL prefill (fp16)
// matches transformers' logits at every position of every prompt; `infer generate --prompt-ids ...
// --print-ids -t 0` prints transformers' greedy ids; bad ids give one-line errors naming the value. The
// newer architectures' fixtures (Qwen3, Llama 3, Gemma 3) are described by their reference files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "framework/core/file.h"
#include "framework/core/npy.h"
#include "tests/common/test_data.h"
#include "tests/infer/hf_reference.h"
#include "tests/infer/test_cli_helpers.h"

namespace anelab {
namespace {

namespace fs = std::filesystem;
using test::anelab;

std::string fixture(const std::string& name) { return test::source_path("tests/fixtures/hf/" + name); }

// The reference of a fixture: reference_<name>.json for the newer architectures, else reference.json.
const nlohmann::json& reference(const std::string& name) {
  const std::string own = "reference_" + name + ".json";
  return test::hf_reference(fs::exists(fixture(own)) ? own : "reference.json")["models"][name];
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

struct Path {
  const char* backend;
  const char* dtype;
};

class LogitsCli : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { dir_ = test::temp_dir("logits_cli"); }
  void TearDown() override { fs::remove_all(dir_); }

  // Every prompt through `infer logits`; the largest error over all positions, each position checked.
  double check_logits(const Path& p, double tol) {
    const std::string name = GetParam();
    const auto& m = reference(name);
    double worst = 0;
    for (size_t i = 0; i < m["prompts"].size(); ++i) {
      const auto prompt = m["prompts"][i].get<std::vector<int32_t>>();
      const std::string out = (dir_ / ("p" + std::to_string(i) + ".npy")).string();
      const auto r = anelab("infer logits -q -m " + fixture(name) + " --backend " + p.backend + " --dtype " + p.dtype +
                            " --ids '" + ids_text(prompt) + "' --out " + out);
      EXPECT_EQ(r.rc, 0) << r.err;
      if (r.rc != 0) return INFINITY;
      const NpyArray a = read_npy(out);
      const int64_t T = static_cast<int64_t>(prompt.size());
      EXPECT_EQ(a.dtype, "<f4");
      EXPECT_EQ(a.shape, (std::vector<int64_t>{T, 512}));
      if (a.shape != std::vector<int64_t>{T, 512}) return INFINITY;
      for (int64_t t = 0; t < T; ++t) {
        const auto ref = m["logits"][i][static_cast<size_t>(t)].get<std::vector<float>>();
        const double e = test::hf_rel_err(a.data.data() + t * 512, ref);
        worst = std::max(worst, e);
        EXPECT_LT(e, tol) << name << " " << p.backend << " prompt " << i << " position " << t;
      }
    }
    return worst;
  }

  void check_greedy(const Path& p) {
    const std::string name = GetParam();
    const auto& m = reference(name);
    for (size_t i = 0; i < m["prompts"].size(); ++i) {
      const auto want = m["greedy"][i].get<std::vector<int32_t>>();
      const auto r = anelab("infer generate -q -m " + fixture(name) + " --backend " + p.backend + " --dtype " +
                            p.dtype + " -t 0 -n " + std::to_string(want.size()) + " --print-ids --prompt-ids '" +
                            ids_text(m["prompts"][i].get<std::vector<int32_t>>()) + "'");
      EXPECT_EQ(r.rc, 0) << r.err;
      EXPECT_EQ(r.out, ids_text(want) + "\n") << name << " " << p.backend << " prompt " << i;
    }
  }

  fs::path dir_;
};

TEST_P(LogitsCli, CpuFp32LogitsMatchTransformersAtEveryPosition) {
  const double e = check_logits({"cpu", "fp32"}, test::hf_fp32_tol(GetParam()));
  RecordProperty("max_rel_err", std::to_string(e));
  std::printf("%s cpu fp32: max |dlogit| / max |logit| = %.3g\n", GetParam().c_str(), e);
}

TEST_P(LogitsCli, EmulatorPrefillLogitsMatchTransformersAtEveryPosition) {
  const double e = check_logits({"emulator", "fp16"}, test::kHfMilFp16Tol);
  std::printf("%s emulator fp16: max |dlogit| / max |logit| = %.3g\n", GetParam().c_str(), e);
}

TEST_P(LogitsCli, GreedyIdsEqualTransformersCpuFp32) { check_greedy({"cpu", "fp32"}); }
TEST_P(LogitsCli, GreedyIdsEqualTransformersEmulatorFp16) { check_greedy({"emulator", "fp16"}); }

INSTANTIATE_TEST_SUITE_P(Architectures, LogitsCli, ::testing::Values("gpt2", "qwen2", "llama_fp16"));
// Gemma 3 (sliding window 4 < the prompts, (1 + w) norms, post norms, GeGLU, soft-capping) and Qwen3 (q/k norms).
INSTANTIATE_TEST_SUITE_P(NewArchitectures, LogitsCli, ::testing::Values("gemma3_bf16", "qwen3_bf16"));
// Llama 3 with llama3 RoPE scaling (original context 32 < the 40-token prompt; factor 8 changes all but the
// fastest of the 8 frequencies, so an engine without the scaling is off from position 1 on).
INSTANTIATE_TEST_SUITE_P(Llama3, LogitsCli, ::testing::Values("llama3_bf16"));

// --mmap off reads the weights into anonymous memory (huge pages advised), --mmap on maps the file: the same
// bytes, so the same logits bit for bit; the load line says which was used; a bad value is named.
TEST(LogitsCliMmap, ReadAndMappedWeightsGiveIdenticalLogits) {
  const auto dir = test::temp_dir("logits_mmap");
  std::vector<std::vector<float>> got;
  for (const char* mode : {"on", "off"}) {
    const std::string out = (dir / (std::string(mode) + ".npy")).string();
    const auto r = anelab("infer logits -m " + fixture("qwen2") + " --backend cpu --mmap " + mode +
                          " --ids '1 2 3 4 5' --out " + out);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(
        r.err.find(std::string("weights ") + (mode == std::string("on") ? "mmap (--mmap on)" : "read (--mmap off")),
        std::string::npos)
        << r.err;
    got.push_back(read_npy(out).data);
  }
  ASSERT_EQ(got[0].size(), got[1].size());
  ASSERT_FALSE(got[0].empty());
  EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)), 0);
  const auto bad = anelab("infer logits -q -m " + fixture("qwen2") + " --mmap maybe --ids '1 2'");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("--mmap"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("maybe"), std::string::npos) << bad.err;
  fs::remove_all(dir);
}

TEST(LogitsCliErrors, BadIdsAreNamedInOneLine) {
  const std::string m = fixture("gpt2");
  const std::string out = (fs::temp_directory_path() / "anelab_logits_never_written.npy").string();
  const struct {
    std::string args, want;
  } cases[] = {
      {"infer logits -q -m " + m + " --ids '1 x 3' --out " + out, "[infer] --ids: 'x' is not a token id"},
      {"infer logits -q -m " + m + " --ids '1 512' --out " + out,
       "[infer] --ids: token id 512 is outside the model's vocabulary of 512"},
      {"infer logits -q -m " + m + " --ids '-1' --out " + out, "token id -1 is outside"},
      {"infer logits -q -m " + m + " --ids ' , ' --out " + out, "[infer] --ids: no token ids"},
      {"infer logits -q -m " + m + " --out " + out, "exactly one of --ids or --prompt"},
      {"infer generate -q -m " + m + " --prompt-ids '4 2.5'", "[infer] --prompt-ids: '2.5' is not a token id"},
      {"infer generate -q -m " + m + " --prompt-ids '9999999999'", "token id 9999999999 is outside"},
      {"infer generate -q -m " + m + " --prompt-ids '99999999999999999999'",
       "'99999999999999999999' is not a token id"},
  };
  for (const auto& c : cases) {
    const auto r = anelab(c.args);
    EXPECT_NE(r.rc, 0) << c.args;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  EXPECT_FALSE(fs::exists(out));
}

// The newer architectures' fixtures, made for the models that follow: each reference file describes its
// model, holds 24-token greedy ids and logits [T, 512] of 40-, 8- and 1-token prompts, and the 40-token
// prompt exceeds what the architecture must handle beyond its local context.
TEST(HfNewFixtures, ReferenceFilesDescribeTheirModels) {
  for (const std::string name : {"qwen3_bf16", "llama3_bf16", "gemma3_bf16"}) {
    const auto& r = test::hf_reference("reference_" + name + ".json");
    ASSERT_TRUE(fs::exists(fixture(name + "/model.safetensors"))) << name;
    const auto cfg = nlohmann::json::parse(read_file_text(fixture(name + "/config.json")));
    EXPECT_EQ(cfg["dtype"], "bfloat16") << name;
    const auto& m = r["models"][name];
    EXPECT_FALSE(m["about"].get<std::string>().empty());
    ASSERT_EQ(m["prompts"].size(), 3u);
    const size_t longest = m["prompts"][0].size();
    EXPECT_EQ(longest, 40u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(m["greedy"][i].size(), 24u) << name;
      EXPECT_EQ(m["logits"][i].size(), m["prompts"][i].size()) << name;
      EXPECT_EQ(m["logits"][i][0].size(), 512u) << name;
    }
    if (name == "llama3_bf16") {
      EXPECT_EQ(cfg["rope_parameters"]["rope_type"], "llama3");
      EXPECT_GT(longest, cfg["rope_parameters"]["original_max_position_embeddings"].get<size_t>());
    } else if (name == "gemma3_bf16") {
      EXPECT_GT(longest, cfg["sliding_window"].get<size_t>());
      EXPECT_NE(cfg["final_logit_softcapping"], nullptr);
      EXPECT_NE(cfg["query_pre_attn_scalar"], cfg["head_dim"]);
    } else {
      EXPECT_NE(cfg["head_dim"].get<int>() * cfg["num_attention_heads"].get<int>(), cfg["hidden_size"].get<int>());
    }
  }
}

}  // namespace
}  // namespace anelab
