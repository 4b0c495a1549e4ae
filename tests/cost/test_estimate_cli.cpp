// `anelab estimate` through the binary (train / infer JSON, one-line errors), the calibration from a probe report and
// the chip parameter files (--calibrate --save, --device-file).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/cost/cost.h"
#include "framework/cost/train_cost.h"

namespace anelab::cost {
namespace {

struct CliRun {
  int rc = 0;
  std::string out;  // stdout + stderr
};

CliRun estimate_cli_run(const std::string& args) {
  const std::string cmd = std::string(ANELAB_BINARY_DIR) + "/bin/anelab estimate " + args + " 2>&1";
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string estimate_cli_tmp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// A probe report in the form cli/probe_cmd.cpp writes (schema anelab.probe/2), with the sections calibrate reads.
nlohmann::json estimate_cli_probe() {
  using nlohmann::json;
  json sizes = json::array();
  for (int i = 0; i < 4; ++i) {
    const double wb = double(1 << (21 + i));  // 2, 4, 8, 16 MiB of weights; the last two past the knee
    sizes.push_back({{"weight_bytes", wb}, {"working_set_bytes", wb + 262144}, {"eval_ms", i < 2 ? 0.1 : wb / 50e6}});
  }
  return {{"schema", "anelab.probe/2"},
          {"device_profile", "m4"},
          {"dispatch_overhead_ms", {{"ane", 0.03}}},
          {"cases",
           {{{"name", "conv"},
             {"shape", "1x1 conv 768->2048, S=256, fp16"},
             {"gflop", 0.805306368},
             {"ane", {{"eval_ms", 0.2}, {"compile_ms", 20.0}, {"load_ms", 1.5}}}},
            {{"name", "conv_w8a8"}, {"gflop", 0.805306368}, {"ane", {{"eval_ms", 0.12}}}}}},
          {"sram", {{"knee", {{"last_fast_bytes", 4456448.0}, {"first_slow_bytes", 8650752.0}}}, {"sizes", sizes}}}};
}

TEST(EstimateCalibrate, RefitsWhatTheProbeMeasures) {
  const Calibration c = calibrate(estimate_cli_probe().dump(), "probe.json", "");
  EXPECT_EQ(c.after.name, "m4");
  EXPECT_DOUBLE_EQ(c.after.dispatch_us, 30.0);
  // (0.2 - 0.03) ms for 0.805 GFLOP at S = 256: 4.74 TFLOPS / eff(256); W8A8 (0.12 - 0.03) ms
  EXPECT_NEAR(c.after.peak_fp16_tflops, 0.805306368 / 0.17 / (256.0 / (256 + 46)), 1e-9);
  EXPECT_NEAR(c.after.int8_speedup, 0.17 / 0.09, 1e-9);
  EXPECT_NEAR(c.after.sram_mb, (4456448.0 + 8650752.0) / 2 / 1048576, 1e-9);
  EXPECT_NEAR(c.after.dram_gbps, 50.0, 1e-6);  // the sizes past the knee take weight_bytes / 50 GB/s
  EXPECT_DOUBLE_EQ(c.after.compile_ms, 21.5);
  EXPECT_EQ(c.changed.size(), 6u);
  // Unchanged: what a probe does not measure, each with its reason.
  EXPECT_EQ(c.after.host_gflops, c.before.host_gflops);
  EXPECT_EQ(c.after.s_half, c.before.s_half);
  std::string nf;
  for (const auto& [p, why] : c.not_fitted) nf += p + ";";
  EXPECT_EQ(nf, "s_half;host_gflops;host_gemm_units;host_gbps;staging_gbps;");
  // --device picks another chip to refit
  EXPECT_EQ(calibrate(estimate_cli_probe().dump(), "probe.json", "m5").after.name, "m5");
}

TEST(EstimateCalibrate, ReportWithoutAneTimings) {
  nlohmann::json r = estimate_cli_probe();
  r["cases"][0]["ane"] = nullptr;  // no ANE on the host: the probe reports the emulator half only
  r.erase("sram");
  const Calibration c = calibrate(r.dump(), "probe.json", "");
  EXPECT_EQ(c.after.peak_fp16_tflops, c.before.peak_fp16_tflops);
  std::string nf;
  for (const auto& [p, why] : c.not_fitted) nf += p + ";";
  EXPECT_EQ(nf,
            "peak_fp16_tflops;int8_speedup;compile_ms;sram_mb;dram_gbps;s_half;host_gflops;host_gemm_units;host_gbps;"
            "staging_gbps;");
}

TEST(EstimateCalibrate, BadReports) {
  auto error_of = [](const std::string& text) -> std::string {
    try {
      calibrate(text, "p.json", "");
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(error_of("{").find("[cost] p.json: not JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"schema": "other/1"})").find("[cost] p.json: not an anelab probe report (schema 'other/1'"),
            std::string::npos);
  nlohmann::json r = estimate_cli_probe();
  r["cases"][0]["gflop"] = -1;
  EXPECT_NE(error_of(r.dump()).find("[cost] p.json: cases[conv].gflop is not a positive number"), std::string::npos);
}

// Chip parameter files: every field survives the round trip; a malformed file is refused naming its field.
TEST(EstimateChipFile, RoundTrip) {
  const Chip& m4 = chip("m4");
  const Chip back = chip_from_json(chip_to_json(m4), "m4.json");
  EXPECT_EQ(back.name, m4.name);
  EXPECT_EQ(back.family, m4.family);
  EXPECT_EQ(back.description, m4.description);
  // JSON numbers print with 17 significant digits: the doubles come back exactly
  for (double Chip::*f : {&Chip::peak_fp16_tflops, &Chip::s_half, &Chip::int8_speedup, &Chip::dram_gbps, &Chip::sram_mb,
                          &Chip::dispatch_us, &Chip::compile_ms, &Chip::host_gflops, &Chip::host_gemm_units,
                          &Chip::host_gbps, &Chip::staging_gbps})
    EXPECT_EQ(back.*f, m4.*f);
  const std::string path = ::testing::TempDir() + "/estimate_chip_rt.json";
  save_chip(m4, path);
  EXPECT_EQ(load_chip(path).dram_gbps, m4.dram_gbps);
}

TEST(EstimateChipFile, MalformedFilesNameTheField) {
  auto error_of = [](const nlohmann::json& j) -> std::string {
    try {
      chip_from_json(j.dump(), "chip.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  const nlohmann::json good = nlohmann::json::parse(chip_to_json(chip("m5")));
  EXPECT_EQ(error_of(good), "no error");
  struct Bad {
    const char* key;
    nlohmann::json value;  // null: the key removed
    const char* expect;
  };
  for (const Bad& b : std::vector<Bad>{
           {"schema", "anelab.chip/1",
            "[cost] chip.json: field 'schema' is \"anelab.chip/1\", expected \"anelab.chip/2\""},
           {"dram_gbps", "fast", "[cost] chip.json: field 'dram_gbps' is \"fast\", expected a positive number"},
           {"peak_fp16_tflops", -3, "[cost] chip.json: field 'peak_fp16_tflops' is -3, expected a positive number"},
           {"host_gflops", nullptr, "[cost] chip.json: field 'host_gflops' is missing, expected a positive number"},
           {"host_gemm_units", 3, "[cost] chip.json: field 'host_gemm_units' is 3, expected 1 or 2"},
           {"family", "m9", "[cost] chip.json: field 'family' is 'm9', not a chip family"},
           {"name", 4, "[cost] chip.json: field 'name' is 4, expected a string"},
           {"dram_gbs", 100, "[cost] chip.json: unknown field 'dram_gbs'"}}) {
    nlohmann::json j = good;
    if (b.value.is_null())
      j.erase(b.key);
    else
      j[b.key] = b.value;
    EXPECT_EQ(error_of(j).rfind(b.expect, 0), 0u) << b.key << ": " << error_of(j);
  }
  EXPECT_NE(error_of(nlohmann::json::array()).find("[cost] chip.json: not a chip parameter file"), std::string::npos);
}

// A probe report from the binary with the fake shim, calibrated and saved; `--device-file` estimates with exactly the
// refit parameters: the step cost is the model's with Calibration::after, not the built-in M4's.
TEST(EstimateCli, CalibrateSaveAndUse) {
  const std::string dir = ::testing::TempDir();
  const std::string probe = dir + "/estimate_fake_probe.json", saved = dir + "/estimate_fake_chip.json";
  const std::string cmd =
      std::string(ANELAB_BINARY_DIR) + "/bin/anelab probe --shim fake --out " + probe + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::remove(saved.c_str());
  const CliRun cal = estimate_cli_run("--calibrate " + probe + " --device m4 --save " + saved);
  ASSERT_EQ(cal.rc, 0) << cal.out;
  EXPECT_NE(cal.out.find("saved to " + saved), std::string::npos) << cal.out;
  const Calibration refit = calibrate(read_file_text(probe), probe, "m4");
  const Chip loaded = load_chip(saved);
  EXPECT_EQ(loaded.peak_fp16_tflops, refit.after.peak_fp16_tflops);
  EXPECT_EQ(loaded.dispatch_us, refit.after.dispatch_us);
  EXPECT_EQ(loaded.host_gflops, chip("m4").host_gflops);  // not measured by a probe: unchanged
  EXPECT_NE(loaded.peak_fp16_tflops, chip("m4").peak_fp16_tflops);

  const CliRun a = estimate_cli_run("train --preset stories110m --strategy static --device m4 --json");
  const CliRun b = estimate_cli_run("train --preset stories110m --strategy static --device-file " + saved + " --json");
  ASSERT_EQ(a.rc, 0) << a.out;
  ASSERT_EQ(b.rc, 0) << b.out;
  const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  // The model with the refit chip, in process (Stories110M: D 768, H 2048, 12 heads of 64, 12 layers, S 256).
  TrainModel m;
  m.shape.dim = 768, m.shape.hidden = 2048, m.shape.n_heads = 12, m.shape.n_kv_heads = 12, m.shape.head_dim = 64;
  m.shape.seq = 256, m.n_layers = 12, m.vocab = 32000;
  const StepCost want = estimate_train(m, kern::Strategy::kStatic, refit.after);
  EXPECT_NEAR(jb["ms_per_step"].get<double>(), want.ms_per_step(), 1e-9 * want.ms_per_step());
  EXPECT_NEAR(jb["ane_ms"].get<double>(), want.ane_ms, 1e-9 * want.ane_ms);
  EXPECT_NE(jb["ane_ms"].get<double>(), ja["ane_ms"].get<double>());
  // the host terms are not what a probe measures: the same on both
  EXPECT_EQ(jb["classifier_ms"].get<double>(), ja["classifier_ms"].get<double>());
  // a malformed file: one line naming the field
  const std::string bad = estimate_cli_tmp("estimate_bad_chip.json", R"({"schema": "anelab.chip/2"})");
  const CliRun r2 = estimate_cli_run("infer --preset qwen2.5-0.5b --device-file " + bad);
  EXPECT_NE(r2.rc, 0);
  EXPECT_EQ(r2.out, "anelab: error: [cost] " + bad + ": field 'name' is missing, expected a string\n");
  const CliRun both = estimate_cli_run("train --preset stories110m --device m5 --device-file " + saved);
  EXPECT_EQ(both.out, "anelab: error: [estimate] give --device or --device-file, not both\n");
}

TEST(EstimateCli, TrainJson) {
  const CliRun r = estimate_cli_run("train --preset stories110m --strategy static --device m4 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["ms_per_step"].get<double>(), 0);
  EXPECT_EQ(j["kernels"].size(), 9u);
  EXPECT_EQ(j["kernels"][0]["calls"].get<int>(), 12);
  for (const auto& k : j["kernels"]) {  // the program time's terms (cost.h): dispatch + fill + max(...) + drain
    const double fill = k["fill_ms"].get<double>(), drain = k["drain_ms"].get<double>();
    const double want = k["dispatch_ms"].get<double>() + fill + drain +
                        std::max(k["compute_ms"].get<double>(), k["memory_ms"].get<double>() - fill - drain);
    EXPECT_NEAR(k["ms"].get<double>(), want, 1e-12) << k["name"];
    EXPECT_GT(fill, 0.0) << k["name"];
  }
  EXPECT_GT(j["ms_per_step_with_compile"].get<double>(), j["ms_per_step"].get<double>());
}

// --lora: both strategies side by side with the recommendation; the 24-layer Qwen2.5-0.5B shape is over static's
// compile budget.
TEST(EstimateCli, TrainLoraJson) {
  const CliRun r = estimate_cli_run(
      "train --preset qwen2.5-0.5b --shape '{\"qkv_bias\": false}' --lora --lora-rank 16 --lora-targets q,v "
      "--steps 500 --device m4 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["lora"]["rank"].get<int>(), 16);
  EXPECT_EQ(j["lora"]["targets"].get<std::string>(), "q,v");
  EXPECT_EQ(j["steps"].get<int>(), 500);
  EXPECT_EQ(j["static"]["compiles"].get<int>(), 2 + 7 * 24);
  EXPECT_EQ(j["dynamic"]["compiles"].get<int>(), 9);
  EXPECT_FALSE(j["static_fits"].get<bool>());
  EXPECT_EQ(j["pick"].get<std::string>(), "dynamic");
  EXPECT_EQ(j["recommendation"].get<std::string>().rfind("static: over the budget (171 of 100 compiles)", 0), 0u)
      << j["recommendation"];
  for (const char* side : {"static", "dynamic"}) {
    EXPECT_EQ(j[side]["kernels"].size(), 9u) << side;
    EXPECT_GT(j[side]["ms_per_step"].get<double>(), 0) << side;
    EXPECT_NEAR(j[side]["compile_ms_per_step"].get<double>(), j[side]["once_ms"].get<double>() / 500, 1e-9) << side;
    EXPECT_GT(j[side]["adapter_staging_mb"].get<double>(), 0) << side;
  }
  const CliRun t = estimate_cli_run("train --preset stories110m --lora --device m1");
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_NE(t.out.find("static: fits the budget (87 of 100 compiles)"), std::string::npos) << t.out;
}

TEST(EstimateCli, InferMatchesAneForge) {
  // ANEForge (arXiv 2606.17090): Qwen3-0.6B decode ~75 tok/s (fitted: M4's DRAM bandwidth), prefill ~8600 tok/s
  // (held out; the prompt length is not in our notes: the S=128 bucket).
  const CliRun r = estimate_cli_run("infer --preset qwen3-0.6b --device m4 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["decode_tok_per_s"].get<double>(), 75, 0.75);
  double s128 = 0;
  for (const auto& b : j["prefill"])
    if (b["tokens"] == 128) s128 = b["tok_per_s"].get<double>();
  std::printf("Qwen3-0.6B m4: prefill S=128 %.0f tok/s (published ~8600), decode %.1f tok/s (published ~75)\n", s128,
              j["decode_tok_per_s"].get<double>());
  EXPECT_NEAR(s128 / 8600, 1.0, 0.3);
}

// A model whose layers differ costs each kind of layer kernel and counts its layers: Qwen3.5-0.8B has 18 Gated DeltaNet
// layers and 6 gated-attention layers (every 4th, full_attention_interval 4: models/arch/qwen35.cpp), Gemma 3 270M 15
// sliding-window layers and 3 global ones (every 6th, sliding_window_pattern 6). Each bucket's prefill is the sum of
// its kernel rows (count x one program) plus the classifier, on every chip.
TEST(EstimateCli, InferCostsEveryKindOfLayer) {
  struct KindCase {
    const char* preset;
    std::map<std::string, int64_t> counts;
  };
  for (const KindCase& kc : {KindCase{"qwen3.5-0.8b", {{"deltanet", 18}, {"attention", 6}}},
                             KindCase{"gemma3-270m", {{"sliding attention", 15}, {"attention", 3}}}})
    for (const char* dev : {"m1", "m2", "m3", "m4", "m5"}) {
      const std::string what = std::string(kc.preset) + " on " + dev;
      const CliRun r = estimate_cli_run(std::string("infer --preset ") + kc.preset + " --device " + dev +
                                        " --bucket 64 --bucket 512 --json");
      ASSERT_EQ(r.rc, 0) << what << ": " << r.out;
      const auto j = nlohmann::json::parse(r.out);
      ASSERT_EQ(j["prefill"].size(), 2u) << what;
      for (const auto& b : j["prefill"]) {
        std::map<std::string, int64_t> counts;
        double sum = 0;
        for (const auto& k : b["kernels"]) {
          counts[k["name"].get<std::string>()] = k["count"].get<int64_t>();
          EXPECT_GT(k["ms"].get<double>(), 0) << what;
          EXPECT_NEAR(k["total_ms"].get<double>(), k["ms"].get<double>() * k["count"].get<double>(),
                      1e-12 * k["total_ms"].get<double>())
              << what;
          sum += k["total_ms"].get<double>();
        }
        EXPECT_EQ(counts, kc.counts) << what << " S=" << b["tokens"];
        const double layers = b["layers_ms"].get<double>(), total = b["prefill_ms"].get<double>();
        EXPECT_NEAR(layers, sum, 1e-12 * sum) << what;
        EXPECT_NEAR(total, sum + b["classifier_ms"].get<double>(), 1e-12 * total) << what;
        EXPECT_NEAR(b["tok_per_s"].get<double>(), b["tokens"].get<double>() / total * 1e3, 1e-9 * 1e6) << what;
      }
      EXPECT_GT(j["decode_tok_per_s"].get<double>(), 0) << what;
    }
  // The DeltaNet kernel and the attention kernel are different programs (not layer 0's costed 24 times).
  const auto j =
      nlohmann::json::parse(estimate_cli_run("infer --preset qwen3.5-0.8b --device m4 --bucket 256 --json").out);
  const auto& ks = j["prefill"][0]["kernels"];
  ASSERT_EQ(ks.size(), 2u);
  EXPECT_NE(ks[0]["gflop"].get<double>(), ks[1]["gflop"].get<double>());
}

// `infer bench` prints the estimate next to what it measures.
TEST(EstimateCli, InferBenchShowsTheEstimate) {
  const std::string model = std::string(ANELAB_DATA_DIR) + "/llama2c/stories260K.bin";
  const std::string cmd = std::string(ANELAB_BINARY_DIR) + "/bin/anelab infer bench -m " + model +
                          " -q --prompt-len 8 --gen-len 4 --ctx 64 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  EXPECT_EQ(pclose(p), 0) << out;
  EXPECT_NE(
      out.find("estimate on the ANE of Apple M4 (4 P + 6 E cores, one P-cluster) (docs/estimate.md): prefill pp8 "),
      std::string::npos)
      << out;
}

TEST(EstimateCli, BadInputIsOneLine) {
  for (const char* args :
       {"train --preset stories110m --strategy sideways", "train --preset nope",
        "train --preset stories110m --device m9", "", "mil /nonexistent.mil",
        "infer --preset qwen2.5-0.5b --bucket 100", "--calibrate /nonexistent.json", "--save /tmp/never_written.json",
        "train --preset stories110m --device-file /nonexistent.json", "train --preset stories110m --cls-vocab 40000",
        "train --preset stories110m --lora --lora-rank 0", "train --preset stories110m --lora --lora-targets q,x",
        "train --preset stories110m --lora-rank 4", "train --model /nonexistent.gguf --shape '{}'"}) {
    const CliRun r = estimate_cli_run(args);
    EXPECT_NE(r.rc, 0) << args;
    ASSERT_FALSE(r.out.empty()) << args;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << args << ": " << r.out;
    EXPECT_EQ(r.out.rfind("anelab: error: ", 0), 0u) << args << ": " << r.out;
  }
  const std::string bad = estimate_cli_tmp("estimate_bad.json", "{\"schema\": 3");
  const CliRun r = estimate_cli_run("--calibrate " + bad);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("[cost] " + bad + ": not JSON"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace anelab::cost
