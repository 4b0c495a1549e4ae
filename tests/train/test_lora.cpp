// LoRA on the CPU executor (train/lora.h) against an independent PyTorch fp64 autograd reference
// (scripts/lora_reference.py: autograd through W + (alpha/r) B·A, no hand-written backward).
//
// Tolerances: anelab computes in fp32, the reference in fp64, so the difference is anelab's fp32 rounding alone:
// the adapter gradients are the same kind of fp32 chain as the full-training gradients of test_reference.cpp
// (sums over B*T positions through 2 layers of softmax / RMSNorm / matmul), where a per-tensor relative L2 error
// of 1e-4 is ~800 ulps of fp32 and far below a formula error (a wrong term or scale gives >= 1e-2). The 20-step
// trajectory: losses within 1e-4 relative, final adapters within 1e-3 relative L2 (Adam's sqrt(v) normalisation
// amplifies the tiny gradients' relative error, as in the full-training trajectory test).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/npy.h"
#include "models/formats/anelab_file.h"
#include "models/formats/gguf.h"
#include "models/formats/safetensors.h"
#include "models/io/adapter.h"
#include "models/io/load_any.h"
#include "models/presets.h"
#include "models/tokenizer/token_file.h"
#include "models/tokenizer/tokenizer.h"
#include "tests/common/test_data.h"
#include "tests/train/helpers.h"
#include "train/checkpoint.h"
#include "train/cpu_model.h"
#include "train/data.h"
#include "train/lora_run.h"
#include "train/trainer.h"

namespace anelab {
namespace {

constexpr int64_t kLoraTestRank = 4;
constexpr double kLoraTestAlpha = 8;

train::LoraLayout lora_test_layout(const models::ModelConfig& cfg,
                                   const std::string& targets = "q,k,v,o,gate,up,down") {
  train::LoraConfig lc;
  lc.rank = kLoraTestRank, lc.alpha = kLoraTestAlpha;
  lc.targets = train::parse_lora_targets(targets);
  return train::LoraLayout(cfg, lc);
}

// Writes the adapters as DIR/lora/<name>.npy for scripts/lora_reference.py.
void write_lora_npys(const std::string& dir, const train::LoraLayout& l, const std::vector<float>& a) {
  std::filesystem::create_directories(dir + "/lora");
  for (const auto& p : l.params()) write_npy(dir + "/lora/" + p.name + ".npy", p.shape, a.data() + p.offset);
}

nlohmann::json lora_test_optim() { return {{"lora", {{"rank", kLoraTestRank}, {"alpha", kLoraTestAlpha}}}}; }

void check_lora_grads(const models::ModelConfig& cfg, int64_t B, int64_t T, const std::string& tag,
                      const std::string& targets = "q,k,v,o,gate,up,down") {
  const auto dir = test::temp_dir("lora_grads_" + tag).string();
  const train::ParamLayout layout(cfg);
  const std::vector<float> w = test::init_with_norm_noise(layout, 7);
  const train::LoraLayout ll = lora_test_layout(cfg, targets);
  auto [a, b] = test::lora_grad_case(ll, B, T, cfg.vocab_size);
  train::CpuModel model(layout);
  std::vector<float> ga(a.size(), 0.0f);
  const train::LoraStep st{&ll, a.data(), ga.data(), 0, 0, true};
  model.set_lora(&st);
  const double loss = model.forward_backward(w.data(), b, 1.0f, nullptr);  // no base gradient buffer at all
  write_lora_npys(dir, ll, a);
  std::string log;
  ASSERT_TRUE(test::run_torch_reference(dir, layout, w, {b}, lora_test_optim(), "grads", &log, "lora_reference.py"))
      << log;
  const double ref_loss = read_npy(dir + "/out/loss.npy").data.at(0);
  EXPECT_NEAR(loss, ref_loss, 1e-5 * std::abs(ref_loss));
  double worst = 0;
  for (const auto& p : ll.params()) {
    const NpyArray ref = read_npy(dir + "/out/grad." + p.name + ".npy");
    ASSERT_EQ(ref.numel(), p.numel) << p.name;
    const double e = test::rel_err(ga.data() + p.offset, ref.data.data(), p.numel);
    worst = std::max(worst, e);
    EXPECT_LT(e, 1e-4) << p.name;
  }
  std::printf("[lora %s] %zu adapter tensors, loss %.6f vs torch %.6f, worst relative L2 %.2e\n", tag.c_str(),
              ll.params().size(), loss, ref_loss, worst);
  std::filesystem::remove_all(dir);
}

// GQA (4 query heads on 2 kv heads), Llama 3 RoPE scaling, every target module.
TEST(Lora, GradientsMatchTorchLlama3Gqa) { check_lora_grads(test::llama3_test_config(), 2, 64, "llama3"); }

// Qwen3: per-head q/k RMSNorm between the q/k adapters and the attention.
TEST(Lora, GradientsMatchTorchQwen3QkNorm) { check_lora_grads(test::qwen3_test_config(), 2, 32, "qwen3"); }

// The backward stops at the lowest adapted step (CpuModel::lowest_adapted_step): with FFN targets alone layer 0's
// attention step is not run backward at all, with o alone layer 0's attention computes no input gradient.
TEST(Lora, GradientsMatchTorchBelowTheLowestAdapter) {
  check_lora_grads(test::llama3_test_config(), 2, 32, "llama3_ffn", "gate,up,down");
  check_lora_grads(test::llama3_test_config(), 2, 32, "llama3_o", "o");
}

train::TrainConfig lora_test_run(const std::string& dir, const models::ModelConfig& cfg, int64_t steps) {
  const std::string init = dir + "/init.anelab";
  if (!std::filesystem::exists(init)) models::write_random_model(cfg, init, 11);
  train::TrainConfig c;
  c.init = init, c.data = test::write_tokens(dir, 6000, cfg.vocab_size, 5), c.run_dir = dir + "/run", c.run = "lora";
  c.steps = steps, c.batch_size = 2, c.seq_len = 32, c.accum_steps = 2, c.lr = 2e-3, c.warmup_steps = 3;
  c.grad_clip = 1.0, c.batching = "sequential", c.eval_batches = 0, c.loss_scale = "static:256";
  c.lora = true, c.lora_rank = kLoraTestRank, c.lora_alpha = kLoraTestAlpha;
  return c;
}

// 20 AdamW steps of `anelab train --lora` (accumulation 2, warmup + cosine, clipping, loss scaling) against
// torch.optim.AdamW on the adapters of the same windows.
TEST(Lora, TwentyStepTrajectoryMatchesTorch) {
  const models::ModelConfig cfg = test::llama3_test_config();
  const auto dir = test::temp_dir("lora_traj").string();
  train::TrainConfig c = lora_test_run(dir, cfg, 20);
  train::validate(c);
  train::run_training(c, {false, false});

  const train::ParamLayout layout(cfg);
  const auto w0 = train::init_from_model(layout, models::load_any_model(c.init));
  const train::LoraLayout ll = lora_test_layout(cfg);
  write_lora_npys(dir + "/ref", ll, train::lora_init(ll, uint64_t(c.seed)));
  const std::vector<train::Batch> batches = test::sequential_batches(c);
  nlohmann::json optim = lora_test_optim();
  optim.update(test::reference_optim(c));
  std::string log;
  ASSERT_TRUE(test::run_torch_reference(dir + "/ref", layout, w0, batches, optim, "train", &log, "lora_reference.py"))
      << log;
  const auto ref_losses = read_npy(dir + "/ref/out/losses.npy").data;
  const auto steps = test::read_events(c.run_dir, "step");
  ASSERT_EQ(steps.size(), size_t(c.steps));
  double worst = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const double l = steps[i]["loss"].get<double>();
    worst = std::max(worst, std::abs(l - ref_losses[i]) / ref_losses[i]);
    EXPECT_NEAR(l, ref_losses[i], 1e-4 * ref_losses[i]) << "step " << i + 1;
  }
  EXPECT_LT(steps.back()["loss"].get<double>(), steps.front()["loss"].get<double>());  // it learned something
  std::vector<float> aw, am, av;
  train::read_lora_state(c.run_dir + "/last.lora", ll, &aw, &am, &av);
  for (const auto& p : ll.params()) {
    const NpyArray ref = read_npy(dir + "/ref/out/final." + p.name + ".npy");
    EXPECT_LT(test::rel_err(aw.data() + p.offset, ref.data.data(), p.numel), 1e-3) << p.name;
  }
  // The base stayed as it was: the checkpoint's model is the base with the adapters merged.
  const auto ck = train::read_checkpoint(c.run_dir + "/last.ckpt");
  std::vector<float> merged = w0;
  train::lora_merge(layout, ll, aw.data(), float(kLoraTestAlpha / double(kLoraTestRank)), merged.data());
  EXPECT_EQ(ck.weights, merged);
  std::printf("[lora trajectory] loss %.5f -> %.5f, worst relative difference to torch %.2e\n",
              steps.front()["loss"].get<double>(), steps.back()["loss"].get<double>(), worst);
  std::filesystem::remove_all(dir);
}

// 6 steps == 3 + --resume + 3, bit for bit, with dropout (its mask stream continues where it stopped).
TEST(Lora, ResumeIsBitExactWithDropout) {
  const models::ModelConfig cfg = test::llama3_test_config();
  const auto dir = test::temp_dir("lora_resume").string();
  train::TrainConfig c = lora_test_run(dir, cfg, 6);
  c.lora_dropout = 0.1, c.batching = "random";
  test::expect_lora_resume_bit_exact(c, 3);
  std::filesystem::remove_all(dir);
}

void expect_same_adapter(const models::LoraAdapter& a, const models::LoraAdapter& b, const std::string& what) {
  EXPECT_EQ(a.rank, b.rank) << what;
  EXPECT_EQ(a.alpha, b.alpha) << what;
  ASSERT_EQ(a.pairs.size(), b.pairs.size()) << what;
  std::map<std::string, const models::LoraPair*> by;
  for (const auto& p : b.pairs) by[p.tensor] = &p;
  for (const auto& p : a.pairs) {
    ASSERT_TRUE(by.count(p.tensor)) << what << " " << p.tensor;
    EXPECT_TRUE(p.a == by[p.tensor]->a) << what << " " << p.tensor << " A";
    EXPECT_TRUE(p.b == by[p.tensor]->b) << what << " " << p.tensor << " B";
  }
}

// export --adapter as PEFT and GGUF, read back with equal tensors (q/k rows through each file's RoPE order), and the
// adapter merged at load (infer --lora) equals the run's merged checkpoint (export --fuse) tensor for tensor.
void check_adapter_files(const models::ModelConfig& cfg, const std::string& tag) {
  const auto dir = test::temp_dir("lora_files_" + tag).string();
  train::TrainConfig c = lora_test_run(dir, cfg, 3);
  c.lora_targets = "q,k,v,o,gate,up,down";
  train::validate(c);
  train::run_training(c, {false, false});
  const train::LoraLayout ll = lora_test_layout(cfg);
  std::vector<float> aw, am, av;
  train::read_lora_state(c.run_dir + "/last.lora", ll, &aw, &am, &av);
  const models::LoraAdapter want = train::to_lora_adapter(ll, aw.data(), c.init);
  train::export_run_adapter(c.run_dir, dir + "/peft");
  train::export_run_adapter(c.run_dir, dir + "/a.gguf");
  const models::LoraAdapter peft = models::read_lora_adapter(dir + "/peft", cfg);
  const models::LoraAdapter gguf = models::read_lora_adapter(dir + "/a.gguf", cfg);
  expect_same_adapter(want, peft, "peft");
  expect_same_adapter(want, gguf, "gguf");
  EXPECT_EQ(peft.base_model, c.init);
  // The files' own layouts: PEFT keys and config, llama.cpp's GGUF keys and ne.
  const auto cj = nlohmann::json::parse(read_file_text(dir + "/peft/adapter_config.json"));
  EXPECT_EQ(cj["r"], kLoraTestRank);
  EXPECT_EQ(cj["lora_alpha"], kLoraTestAlpha);
  EXPECT_EQ(cj["target_modules"].size(), 7u);
  auto bytes = std::make_shared<std::vector<uint8_t>>(read_file_bytes(dir + "/peft/adapter_model.safetensors"));
  const auto st = models::parse_safetensors(bytes->data(), bytes->size(), bytes, "peft");
  ASSERT_TRUE(st.count("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"));
  EXPECT_EQ(st.at("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight").shape,
            (std::vector<int64_t>{cfg.dim, kLoraTestRank}));
  const models::GgufFile g = models::read_gguf_file(dir + "/a.gguf");
  EXPECT_EQ(g.get_str("general.type", "g"), "adapter");
  EXPECT_EQ(g.get_str("adapter.type", "g"), "lora");
  EXPECT_EQ(g.get_num("adapter.lora.alpha", 0.0), kLoraTestAlpha);
  bool seen = false;
  for (const auto& t : g.tensors)
    if (t.name == "blk.0.ffn_gate.weight.lora_a") {
      EXPECT_EQ(t.ne, (std::vector<int64_t>{cfg.dim, kLoraTestRank}));  // [in, r]: model.ne[0] == a.ne[0]
      seen = true;
    }
  EXPECT_TRUE(seen);
  models::Model base = models::load_any_model(c.init);
  models::merge_lora(base, peft, 1.0f);
  const models::Model fused = models::load_any_model(c.run_dir);
  for (const auto& t : fused.tensors()) EXPECT_TRUE(t.to_f32() == base.tensor(t.name).to_f32()) << t.name;
  std::filesystem::remove_all(dir);
}

TEST(Lora, AdapterFilesRoundTripLlama3) { check_adapter_files(test::llama3_test_config(), "llama3"); }
TEST(Lora, AdapterFilesRoundTripQwen3) { check_adapter_files(test::qwen3_test_config(), "qwen3"); }
TEST(Lora, AdapterFilesRoundTripStories260kAdjacentPairs) {
  check_adapter_files(models::preset("stories260k"), "260k");
}

// MLX-LM's JSONL forms (train/data.h): packed with BOS/EOS, prompt tokens masked out of the loss by default.
TEST(LoraData, JsonlPromptCompletionMasksThePrompt) {
  const auto dir = test::temp_dir("jsonl").string();
  const auto tk = tok::load_tokenizer(test::data_path("llama2c/tok512.bin"));
  std::string rows;
  for (int i = 0; i < 40; ++i)
    rows += R"({"prompt": "Once upon a time", "completion": " there was a cat."})"
            "\n"
            R"({"text": "Lily ran home."})"
            "\n";
  write_file_atomic(dir + "/d.jsonl", rows);
  const train::TokenData d(dir + "/d.jsonl", 0.0, 16, train::JsonlOptions{tk.get(), tok::ChatTemplate::kNone, true});
  tok::EncodeOptions bos, eos, both;
  bos.add_bos = true, eos.add_eos = true, both.add_bos = both.add_eos = true;
  const auto p = tk->encode("Once upon a time", bos), c = tk->encode(" there was a cat.", eos);
  const auto t = tk->encode("Lily ran home.", both);
  const size_t per = p.size() + c.size() + t.size();
  ASSERT_EQ(d.n_tokens(), int64_t(40 * per));
  const auto& m = d.target_mask();
  ASSERT_EQ(m.size(), 40 * per);
  for (size_t i = 0; i < per; ++i) EXPECT_EQ(m[i], i < p.size() ? 0 : 1) << i;
  EXPECT_EQ(d.tokens()[0], p[0]);
  EXPECT_EQ(d.tokens()[p.size()], c[0]);
  const train::TokenData all(dir + "/d.jsonl", 0.0, 16, train::JsonlOptions{tk.get(), tok::ChatTemplate::kNone, false});
  EXPECT_TRUE(std::all_of(all.target_mask().begin(), all.target_mask().end(), [](uint8_t v) { return v == 1; }));
  // The batcher's mask is the targets' (tokens pos+1 .. pos+T).
  train::Batcher bt(d, 1, 16, false, 0);
  const train::Batch b = bt.next();
  ASSERT_EQ(b.mask.size(), 16u);
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(b.mask[i], m[i + 1]) << i;
  write_file_atomic(dir + "/bad.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
  try {
    train::TokenData(dir + "/bad.jsonl", 0.0, 16, train::JsonlOptions{tk.get(), tok::ChatTemplate::kNone, true});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:1"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// The fine-tuning example's training stream (`anelab tokenize --whole`) is the token stream `anelab perplexity`
// scores (the text encoded with BOS first, cli/perplexity_cmd.cpp): a LoRA trained on held-out-like text then
// lowers the measured loss. The default layout (BOS per blank-line paragraph) puts a BOS inside every
// multi-paragraph story and drops the "\n\n" tokens the measurement scores: a LoRA fitted to it raised the
// held-out TinyStories NLL by 5 % (docs/finetuning.md).
TEST(LoraData, WholeTokenFileIsThePerplexityStream) {
  const auto dir = test::temp_dir("whole").string();
  const auto tk = tok::load_tokenizer(test::data_path("llama2c/tok512.bin"));
  std::string text;
  for (int i = 0; i < 30; ++i)
    text += "Once upon a time, there was a cat.\n\nThe cat ran home. It was happy.\n\nLily saw a red ball.\n\n";
  tok::write_token_file(*tk, text, dir + "/w.bin", "tok512", true);
  tok::EncodeOptions bos;
  bos.add_bos = true;
  const std::vector<int32_t> scored = tk->encode(text, bos);
  const train::TokenData d(dir + "/w.bin", 0.0, 16);
  ASSERT_EQ(d.n_tokens(), int64_t(scored.size()));
  EXPECT_TRUE(std::equal(scored.begin(), scored.end(), d.tokens()));
  EXPECT_EQ(std::count(d.tokens(), d.tokens() + d.n_tokens(), tk->bos_id()), 1);
  std::filesystem::remove_all(dir);
}

// Chat messages through the model's template (the Qwen tokenizer of ../shared/data/qwen): only the last assistant turn
// is a target.
TEST(LoraData, JsonlMessagesTrainTheLastAssistantTurn) {
  const auto dir = test::temp_dir("jsonl_chat").string();
  const auto tk = tok::load_tokenizer(test::data_path("qwen/tokenizer.json"));
  const tok::ChatTemplate chat = tok::chat_template_for(*tk, "auto");
  ASSERT_NE(chat, tok::ChatTemplate::kNone);
  std::string rows;
  for (int i = 0; i < 20; ++i)
    rows += R"({"messages": [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Red."}]})"
            "\n";
  write_file_atomic(dir + "/c.jsonl", rows);
  const train::TokenData d(dir + "/c.jsonl", 0.0, 16, train::JsonlOptions{tk.get(), chat, true});
  const auto& m = d.target_mask();
  const int64_t per = d.n_tokens() / 20;
  std::vector<int32_t> counted;
  for (int64_t i = 0; i < per; ++i)
    if (m[size_t(i)]) counted.push_back(d.tokens()[i]);
  const std::string reply = tk->decode(counted, true);
  // The assistant turn after the generation prompt "<|im_start|>assistant\n": the reply (after Qwen3's empty
  // reasoning block when the template is qwen3) and the end of turn.
  EXPECT_NE(reply.find("Red.<|im_end|>"), std::string::npos) << "[" << reply << "]";
  EXPECT_EQ(reply.find("assistant"), std::string::npos) << "[" << reply << "]";
  EXPECT_EQ(reply.find("Name a colour"), std::string::npos) << reply;  // nothing of the prompt
  EXPECT_LT(int64_t(counted.size()), per / 2);
  std::filesystem::remove_all(dir);
}

// A masked loss is the mean cross-entropy of the counted targets alone: with one target counted it equals that
// position's -log softmax, computed from the causal prefix (last_logits) independently.
TEST(LoraData, MaskedLossIsTheMeanOfTheCountedTargets) {
  const models::ModelConfig cfg = test::llama3_test_config();
  const train::ParamLayout layout(cfg);
  const std::vector<float> w = train::init_random(layout, 5);
  train::Rng rng{3};
  const int64_t T = 12;
  train::Batch b{1, T, std::vector<int32_t>(size_t(T + 1)), {}};
  for (auto& t : b.tokens) t = int32_t(rng.next() % uint64_t(cfg.vocab_size));
  train::CpuModel model(layout);
  const double full = model.loss(w.data(), b);
  b.mask.assign(size_t(T), 1);
  EXPECT_EQ(model.loss(w.data(), b), full);
  double sum = 0;
  for (int64_t pos : {4, 9}) {
    std::vector<float> logits;
    model.last_logits(w.data(), b.tokens.data(), pos + 1, &logits);
    double mx = logits[0], z = 0;
    for (float v : logits) mx = std::max(mx, double(v));
    for (float v : logits) z += std::exp(double(v) - mx);
    sum += std::log(z) + mx - logits[size_t(b.tokens[size_t(pos + 1)])];
  }
  std::fill(b.mask.begin(), b.mask.end(), 0);
  b.mask[4] = b.mask[9] = 1;
  EXPECT_NEAR(model.loss(w.data(), b), sum / 2, 1e-5 * sum);
  std::vector<float> g(w.size(), 0.0f);
  EXPECT_NEAR(model.forward_backward(w.data(), b, 1.0f, g.data()), sum / 2, 1e-5 * sum);
}

// (Every --strategy takes --lora: test_lora_kernels.cpp for static and dynamic.)
TEST(Lora, BadTargetsAreRefusedInOneLine) {
  train::TrainConfig c;
  c.preset = "stories260k", c.data = "x.bin", c.lora = true;
  c.strategy = "cpu", c.lora_targets = "q,x";
  try {
    train::validate(c);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace anelab
