#include "tests/train/helpers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "framework/core/file.h"
#include "framework/core/npy.h"
#include "models/arch/arch.h"
#include "models/formats/checkpoint_file.h"
#include "models/formats/model_config_json.h"
#include "tests/common/test_data.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/lora_run.h"
#include "train/trainer.h"

namespace anelab::test {
namespace fs = std::filesystem;

std::string write_tokens(const std::string& dir, int64_t n, int64_t vocab, uint64_t seed) {
  train::Rng rng{seed};
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)  // a mix of a repeating pattern and noise, so the loss can drop
    t[size_t(i)] = uint16_t(i % 7 == 0 ? rng.next() % uint64_t(vocab) : (i * 13 + i / 7) % vocab);
  const std::string p = dir + "/tokens.bin";
  write_file_atomic(p, t.data(), t.size() * 2);
  return p;
}

std::vector<int32_t> read_tokens_u16(const std::string& path) {
  const auto b = read_file_bytes(path);
  std::vector<int32_t> t(b.size() / 2);
  for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t(b[2 * i] | (b[2 * i + 1] << 8));
  return t;
}

// Whole lines only: a test polling the file of a run still writing it can see a line's first bytes, which
// are left for a later read (not parsed, so not a JSON error).
std::vector<nlohmann::json> read_events(const std::string& dir, const std::string& type) {
  std::ifstream f(dir + "/events.jsonl");
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(f, line)) {
    if (f.eof()) break;  // no '\n' after it: still being written
    auto j = nlohmann::json::parse(line);
    if (j.at("event") == type) out.push_back(j);
  }
  return out;
}

nlohmann::json reference_optim(const train::TrainConfig& c) {
  return {{"lr", c.lr},
          {"beta1", c.beta1},
          {"beta2", c.beta2},
          {"eps", c.eps},
          {"weight_decay", c.weight_decay},
          {"steps", c.steps},
          {"accum", c.accum_steps},
          {"warmup_steps", c.warmup_steps},
          {"schedule", c.schedule},
          {"min_lr_frac", c.min_lr_frac},
          {"grad_clip", c.grad_clip}};
}

std::vector<train::Batch> sequential_batches(const train::TrainConfig& c) {
  train::TokenData td(c.data, c.val_frac, c.seq_len);
  train::Batcher bt(td, c.batch_size, c.seq_len, false, 0);
  std::vector<train::Batch> batches;
  for (int i = 0; i < c.steps * c.accum_steps; ++i) batches.push_back(bt.next());
  return batches;
}

bool run_torch_reference(const std::string& dir, const train::ParamLayout& layout, const std::vector<float>& w,
                         const std::vector<train::Batch>& batches, const nlohmann::json& optim, const std::string& mode,
                         std::string* log, const std::string& script) {
  fs::create_directories(dir + "/weights");
  nlohmann::json cfg = models::model_config_to_json(layout.config());
  cfg["optim"] = optim;
  cfg["tensors"] = nlohmann::json::array();
  for (const auto& p : layout.params()) {
    cfg["tensors"].push_back(p.name);
    write_npy(dir + "/weights/" + p.name + ".npy", p.shape, w.data() + p.offset);
  }
  write_file_atomic(dir + "/config.json", cfg.dump(1));
  const auto& b0 = batches.at(0);
  std::vector<float> toks;
  for (const auto& b : batches) toks.insert(toks.end(), b.tokens.begin(), b.tokens.end());
  write_npy(dir + "/batches.npy", {int64_t(batches.size()), b0.B, b0.T + 1}, toks.data());
  const std::string cmd =
      "/usr/bin/python3 " + std::string(ANELAB_SOURCE_DIR) + "/scripts/" + script + " " + dir + " " + mode + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) log->append(buf, n);
  return ::pclose(p) == 0;
}

double rel_err(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

void expect_grads_match_reference(const train::ParamLayout& layout, const std::vector<float>& w, const train::Batch& b,
                                  const std::string& tag, double bound, const std::string& script) {
  const auto dir = temp_dir("grads_" + tag).string();
  train::CpuModel model(layout);
  std::vector<float> g(w.size(), 0.0f);
  const double loss = model.forward_backward(w.data(), b, 1.0f, g.data());
  std::string log;
  ASSERT_TRUE(run_torch_reference(dir, layout, w, {b}, nlohmann::json::object(), "grads", &log, script)) << log;
  const double ref_loss = read_npy(dir + "/out/loss.npy").data.at(0);
  EXPECT_NEAR(loss, ref_loss, 1e-5 * std::abs(ref_loss));
  double worst = 0;
  std::string each;
  for (const auto& p : layout.params()) {
    const NpyArray ref = read_npy(dir + "/out/grad." + p.name + ".npy");
    ASSERT_EQ(ref.numel(), p.numel) << p.name;
    const double e = rel_err(g.data() + p.offset, ref.data.data(), p.numel);
    worst = std::max(worst, e);
    char buf[96];
    std::snprintf(buf, sizeof buf, " %s %.1e", p.name.c_str(), e);
    each += buf;
    EXPECT_LT(e, bound) << p.name;
  }
  std::printf("[%s] loss %.6f vs reference %.6f, worst gradient relative error %.2e; per tensor:%s\n", tag.c_str(),
              loss, ref_loss, worst, each.c_str());
  std::filesystem::remove_all(dir);
}

models::ModelConfig gqa_test_config() {
  models::ModelConfig c;
  c.arch = "qwen2";
  c.dim = 48, c.hidden_dim = 80, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16;
  c.vocab_size = 97, c.max_seq_len = 64, c.norm_eps = 1e-6f, c.rope_theta = 1e6f;
  c.rope_style = models::RopeStyle::kRotateHalf;
  c.tied_embeddings = false;
  return c;
}

models::ModelConfig llama3_test_config() {
  models::ModelConfig c;
  c.arch = "llama";
  c.dim = 64, c.hidden_dim = 96, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16;
  c.vocab_size = 97, c.max_seq_len = 128, c.norm_eps = 1e-5f, c.rope_theta = 10000.0f;
  c.rope_style = models::RopeStyle::kRotateHalf;
  // wavelengths 2*pi / theta^(-2i/16): 6.3 (< 32/4: kept), 19.9 (blended), 62.8 ... (> 32/1: divided by 8)
  c.rope_scaling = {models::RopeScalingType::kLlama3, 8.0f, 1.0f, 4.0f, 32};
  c.tied_embeddings = true;
  return c;
}

models::ModelConfig qwen3_test_config() {
  models::ModelConfig c;
  c.arch = "qwen3";
  c.dim = 48, c.hidden_dim = 80, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16;
  c.vocab_size = 97, c.max_seq_len = 128, c.norm_eps = 1e-6f, c.rope_theta = 1e6f;
  c.rope_style = models::RopeStyle::kRotateHalf;
  c.tied_embeddings = true;
  return c;
}

models::ModelConfig gemma3_test_config() {
  models::ModelConfig c;
  c.arch = "gemma3";
  c.dim = 48, c.hidden_dim = 80, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 1, c.head_dim = 16;
  c.vocab_size = 97, c.max_seq_len = 128, c.norm_eps = 1e-6f, c.rope_theta = 1e6f;
  c.rope_style = models::RopeStyle::kRotateHalf;
  c.activation = models::Activation::kGeluTanhGated;
  // Gemma 3's parameters (its table, models/arch/gemma3.cpp)
  for (auto [name, v] : {std::pair<const char*, double>{"rope_local_theta", 1e4},
                         {"rope_linear_factor", 2.0},
                         {"norm_offset", 1.0},
                         {"embed_scale", std::sqrt(48.0f)},
                         {"attn_scale", 1.0f / std::sqrt(32.0f)},  // query_pre_attn_scalar 32
                         {"sliding_window", 8},
                         {"sliding_pattern", 2},
                         {"logit_softcap", 0.5}})
    models::set_param_named(&c, name, v);
  c.tied_embeddings = true;
  return c;
}

std::vector<float> init_with_norm_noise(const train::ParamLayout& layout, uint64_t seed) {
  std::vector<float> w = train::init_random(layout, seed);
  train::Rng rng{seed ^ 0x9e3779b97f4a7c15ull};
  for (const auto& p : layout.params())
    if (p.shape.size() == 1)
      for (int64_t i = 0; i < p.numel; ++i)
        w[size_t(p.offset + i)] = 1.0f + 0.5f * (float(rng.next() >> 40) / 16777216.0f - 0.5f);
  return w;
}

train::TrainConfig small_run(const std::string& dir, const std::string& data, const std::string& strategy) {
  train::TrainConfig c;
  c.preset = "stories260k", c.data = data, c.run_dir = dir, c.run = "t", c.strategy = strategy;
  c.steps = 20, c.batch_size = 2, c.seq_len = 64, c.lr = 2e-3, c.warmup_steps = 2;
  c.eval_batches = 0, c.compile_budget = 100000;
  train::validate(c);
  return c;
}

std::vector<double> losses(const std::string& dir) {
  std::vector<double> v;
  for (const auto& e : read_events(dir, "step")) v.push_back(e["loss"].get<double>());
  return v;
}

void expect_same_state(const std::string& a, const std::string& b) {
  const auto x = train::read_checkpoint(a + "/last.ckpt"), y = train::read_checkpoint(b + "/last.ckpt");
  EXPECT_EQ(x.step, y.step);
  EXPECT_TRUE(x.weights == y.weights) << "weights differ";
  EXPECT_TRUE(x.m == y.m && x.v == y.v) << "moments differ";
  EXPECT_EQ(x.data_state, y.data_state);
  EXPECT_EQ(x.ls_scale, y.ls_scale);
  EXPECT_EQ(losses(a), losses(b));  // bitwise (JSON doubles round-trip)
}

CheckpointBytes split_checkpoint(const std::vector<uint8_t>& b) {
  CheckpointBytes c;
  uint64_t hl = 0;
  std::memcpy(&c.version, b.data() + 8, 4);
  std::memcpy(&hl, b.data() + 16, 8);
  const size_t at = c.version >= 3 ? 32 : 24;
  if (c.version >= 3) std::memcpy(&c.header_sum, b.data() + 24, 8);
  c.header.assign(reinterpret_cast<const char*>(b.data() + at), hl);
  c.data.assign(b.begin() + long((at + hl + 63) / 64 * 64), b.end());
  return c;
}

std::vector<uint8_t> join_checkpoint(uint32_t version, const std::string& header, const std::vector<uint8_t>& data,
                                     std::optional<uint64_t> header_sum) {
  const size_t at = version >= 3 ? 32 : 24;
  std::vector<uint8_t> b(at, 0);
  std::memcpy(b.data(), "ANELABCK", 8);
  std::memcpy(b.data() + 8, &version, 4);
  const uint64_t hl = header.size();
  std::memcpy(b.data() + 16, &hl, 8);
  if (version >= 3) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
    for (unsigned char ch : header) h = (h ^ ch) * 0x100000001b3ull;
    const uint64_t s = header_sum ? *header_sum : h;
    std::memcpy(b.data() + 24, &s, 8);
  }
  b.insert(b.end(), header.begin(), header.end());
  b.resize((b.size() + 63) / 64 * 64, 0);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void expect_lora_resume_bit_exact(const train::TrainConfig& c, int64_t split) {
  train::TrainConfig straight = c;
  train::validate(straight);
  train::run_training(straight, {false, false});
  train::TrainConfig h = straight;
  h.run_dir = c.run_dir + "2", h.stop_after = split;
  train::run_training(h, {false, false});
  h.stop_after = 0, h.resume = true;
  train::run_training(h, {false, false});
  EXPECT_TRUE(read_file_bytes(c.run_dir + "/last.lora") == read_file_bytes(h.run_dir + "/last.lora"));
  const auto s1 = read_events(c.run_dir, "step"), s2 = read_events(h.run_dir, "step");
  ASSERT_EQ(s1.size(), size_t(c.steps));
  ASSERT_EQ(s2.size(), size_t(c.steps));
  for (size_t i = 0; i < s1.size(); ++i) EXPECT_EQ(s1[i]["loss"].get<double>(), s2[i]["loss"].get<double>()) << i;
}

models::Tensor typed_test_matrix(int64_t rows, int64_t cols, models::DType dtype, uint64_t seed,
                                 std::vector<float>* deq) {
  std::vector<float> f(size_t(rows * cols));
  train::Rng rng{seed};
  for (float& v : f) v = float((double(rng.next() >> 11) * 0x1.0p-53 * 2 - 1) * 0.5);
  models::Model m;
  std::vector<uint8_t> bytes(size_t(models::dtype_nbytes(dtype, rows * cols)));
  models::f32_to_dtype(f.data(), dtype, bytes.data(), rows * cols);
  m.add_owned("w", dtype, {rows, cols}, std::move(bytes));
  *deq = m.tensor("w").to_f32();
  return m.tensor("w");
}

LoraGradCase lora_grad_case(const train::LoraLayout& ll, int64_t B, int64_t T, int64_t vocab) {
  LoraGradCase c{train::lora_init(ll, 3), train::Batch{B, T, std::vector<int32_t>(size_t(B * (T + 1)))}};
  train::Rng rng{17};
  for (const auto& s : ll.slots())
    for (int64_t i = 0; i < s.out * ll.lora().rank; ++i)
      c.a[size_t(s.b + i)] = float((double(rng.next() >> 11) * 0x1.0p-53 * 2 - 1) * 0.1);
  for (auto& t : c.b.tokens) t = int32_t(rng.next() % uint64_t(vocab));
  return c;
}

}  // namespace anelab::test
