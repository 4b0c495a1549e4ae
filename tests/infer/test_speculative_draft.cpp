// Speculative decoding with a draft model (GenerateOptions::draft, --model-draft): random-weight models of the
// Qwen2.5 layout, a target and smaller drafts of the same vocabulary.
//   - greedy: the tokens and log-probabilities of plain decoding bit for bit (fp16 and Q8_0 targets), with a draft that
//     agrees often (the target's own weights in fp32: most drafts kept, whole runs accepted) and one that rarely does
//     (another random model: the first draft rejected most of the time);
//   - sampled: the standard acceptance rule keeps the target's distribution. Reference: the exact probability of each
//     sequence of four tokens, the product of the target's own sampling distributions (Sampler::distribution of its
//     prefill and decode logits, per prefix); the frequencies of N generations must lie within a Bernstein bound of
//     it, for every sequence at once (failure probability 1e-6 by a union bound);
//   - a draft of another vocabulary is refused naming both files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "infer/load.h"
#include "models/presets.h"
#include "models/quant/quant_mix.h"
#include "models/sampler.h"

namespace anelab::infer {
namespace {

models::ModelConfig draft_test_config(int64_t dim, int64_t layers, int64_t vocab) {
  models::ModelConfig c = models::preset("qwen2.5-0.5b");
  c.dim = dim, c.hidden_dim = 2 * dim, c.n_layers = layers, c.head_dim = 16, c.n_heads = dim / 16, c.n_kv_heads = 1;
  c.vocab_size = vocab, c.max_seq_len = 128;
  c.tied_embeddings = false;  // tied random embeddings make each token its own most likely successor: "x x x ..."
  return c;
}

Engine draft_test_engine(const models::Model& base, WType dtype, bool q8_0) {
  models::Model m = q8_0 ? models::quantize_model(base, models::QuantMix::kQ8_0) : base;
  m.private_memory = true;  // the engine's own bytes: Q8_0 matrices become row tiles
  EngineOptions o;
  o.backend = "cpu";
  o.quiet = true;
  o.dtype = dtype;
  o.keep_quantized = q8_0;
  o.threads = 2;
  return Engine(std::move(m), o);
}

TEST(InferSpeculativeDraft, GreedyIsPlainDecodingBitForBit) {
  const models::Model target = models::random_model(draft_test_config(64, 2, 256), 11);
  const models::Model other = models::random_model(draft_test_config(32, 1, 256), 12);
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 17, 42};
  struct Case {
    const char* name;
    WType dtype;
    bool q8_0;
  };
  for (const Case& c : {Case{"fp16", WType::kF16, false}, Case{"q8_0", WType::kF32, true}}) {
    Engine e = draft_test_engine(target, c.dtype, c.q8_0);
    if (c.q8_0) {
      ASSERT_GT(e.tiled_bytes(), 0);
    }
    GenerateOptions o;
    o.max_new_tokens = 60;
    o.sampling.temperature = 0;
    o.sampler = SamplerKind::kGeneral;
    o.logprobs = 2;  // the logits' bits: each token's log-probability and the two most likely alternatives
    const GenerateResult plain = generate_tokens(e, nullptr, prompt, 0, o, {});
    ASSERT_EQ(plain.new_tokens.size(), 60u);
    struct DraftCase {
      const char* name;
      const models::Model* model;
      bool agrees;  // most drafts kept
    };
    for (const DraftCase& dc :
         {DraftCase{"own fp32 weights", &target, true}, DraftCase{"other model", &other, false}}) {
      Engine draft = draft_test_engine(*dc.model, WType::kF32, false);
      EngineForward df(draft);
      std::vector<int32_t> held;
      for (const int32_t k : {1, 4, 7}) {
        SCOPED_TRACE(std::string(c.name) + ", draft " + dc.name + ", draft_max " + std::to_string(k));
        GenerateOptions so = o;
        so.draft_max = k;
        so.draft.forward = &df;
        so.draft.vocab = draft.config().vocab_size;
        so.draft.held = &held;  // kept across the runs: the next one reuses the draft's cached prompt
        const GenerateResult spec = generate_tokens(e, nullptr, prompt, 0, so, {});
        EXPECT_EQ(spec.new_tokens, plain.new_tokens);
        ASSERT_EQ(spec.logprobs.size(), plain.logprobs.size());
        for (size_t i = 0; i < plain.logprobs.size(); ++i) {
          ASSERT_EQ(spec.logprobs[i].logprob, plain.logprobs[i].logprob) << "token " << i;
          ASSERT_EQ(spec.logprobs[i].top, plain.logprobs[i].top) << "token " << i;
        }
        EXPECT_GT(spec.drafted, 0);
        EXPECT_LE(spec.accepted, spec.drafted);
        if (dc.agrees) {
          EXPECT_GT(spec.accepted * 2, spec.drafted) << "the target's own weights should agree on most drafts";
          EXPECT_LT(spec.batched_passes, 60) << "whole runs of drafts accepted: fewer passes than tokens";
        }
        std::printf("[draft] %s, %s, K=%d: %lld drafted, %lld accepted, %lld passes\n", c.name, dc.name, k,
                    static_cast<long long>(spec.drafted), static_cast<long long>(spec.accepted),
                    static_cast<long long>(spec.batched_passes));
      }
    }
  }
}

// The half-width t of a Bernstein bound: P(|f - p| >= t) <= 2 exp(-N t^2 / (2 p (1 - p) + 2 t / 3)) = delta for the
// frequency f of an event of probability p in N independent draws.
double draft_test_bernstein(double p, double n, double delta) {
  const double l = std::log(2.0 / delta), b = 2.0 * l / 3.0;
  return (b + std::sqrt(b * b + 8.0 * n * l * p * (1.0 - p))) / (2.0 * n);
}

TEST(InferSpeculativeDraft, SampledTokensFollowTheTargetsDistribution) {
  constexpr int64_t kVocab = 6;
  constexpr int kNew = 4, kRuns = 30000;
  const models::Model target_m = models::random_model(draft_test_config(32, 1, kVocab), 21);
  const models::Model draft_m = models::random_model(draft_test_config(32, 1, kVocab), 22);
  Engine e = draft_test_engine(target_m, WType::kF32, false);
  Engine draft = draft_test_engine(draft_m, WType::kF32, false);
  const std::vector<int32_t> prompt = {1, 4};
  models::SamplerOptions so;
  so.temperature = 0.25f;  // sharpens the random models' flat logits: target and draft then disagree (TV printed)
  so.top_k = 5;            // one token dropped per position: q or p zero somewhere
  // The exact distribution of the four tokens: p(a) p(b | a) p(c | a, b) p(d | a, b, c), each from the target's logits.
  std::map<std::vector<int32_t>, double> exact;
  auto dist = [&](const float* logits, const std::vector<int32_t>& hist) {
    std::vector<float> l(logits, logits + kVocab), p(kVocab);
    models::Sampler s(kVocab, so);
    s.distribution(l, hist, p);
    return p;
  };
  double tv = 0;  // total variation between the target's and the draft's first-token distributions
  {
    const std::vector<float> p0 = dist(e.prefill(prompt, 0), prompt);
    const std::vector<float> q0 = dist(draft.prefill(prompt, 0), prompt);
    for (int64_t i = 0; i < kVocab; ++i) tv += 0.5 * std::abs(p0[static_cast<size_t>(i)] - q0[static_cast<size_t>(i)]);
    // Depth-first over the prefixes: the target's distribution after each (prefilled afresh, its last token decoded).
    std::vector<int32_t> seq;
    std::function<void(const std::vector<float>&, double)> walk = [&](const std::vector<float>& p, double prob) {
      for (int32_t t = 0; t < kVocab; ++t) {
        if (p[static_cast<size_t>(t)] == 0) continue;
        seq.push_back(t);
        const double pt = prob * p[static_cast<size_t>(t)];
        if (seq.size() == static_cast<size_t>(kNew)) {
          exact[seq] = pt;
        } else {
          std::vector<int32_t> h = prompt;
          h.insert(h.end(), seq.begin(), seq.end() - 1);
          e.prefill(h, 0);
          h.push_back(t);
          walk(dist(e.decode(t, static_cast<int64_t>(h.size()) - 1), h), pt);
        }
        seq.pop_back();
      }
    };
    walk(p0, 1.0);
  }
  std::printf("[draft] total variation between the target's and the draft's first token: %.3f\n", tv);
  ASSERT_GT(tv, 0.2) << "the draft must differ from the target for the test to tell the rules apart";
  EngineForward df(draft);
  std::vector<int32_t> held;
  std::map<std::vector<int32_t>, int> seen;
  int64_t drafted = 0, accepted = 0;
  for (int run = 0; run < kRuns; ++run) {
    GenerateOptions o;
    o.max_new_tokens = kNew;
    o.sampler = SamplerKind::kGeneral;
    o.sampling = so;
    o.sampling.seed = 1000 + static_cast<uint64_t>(run);
    o.draft_max = 2;
    o.draft.forward = &df;
    o.draft.vocab = kVocab;
    o.draft.held = &held;
    const GenerateResult r = generate_tokens(e, nullptr, prompt, 0, o, {});
    ASSERT_EQ(r.new_tokens.size(), static_cast<size_t>(kNew));
    ++seen[r.new_tokens];
    drafted += r.drafted, accepted += r.accepted;
  }
  std::printf("[draft] %d runs: %lld drafted, %lld accepted (%.1f %%), %zu distinct sequences of %zu possible\n", kRuns,
              static_cast<long long>(drafted), static_cast<long long>(accepted), 100.0 * accepted / drafted,
              seen.size(), exact.size());
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);
  const double delta = 1e-6 / static_cast<double>(exact.size());  // union bound over the sequences
  double worst = 0;
  for (const auto& [seq, p] : exact) {
    const double f = seen.count(seq) ? double(seen.at(seq)) / kRuns : 0.0;
    const double t = draft_test_bernstein(p, kRuns, delta);
    worst = std::max(worst, std::abs(f - p) / t);
    EXPECT_LE(std::abs(f - p), t) << "sequence " << seq[0] << " " << seq[1] << " " << seq[2] << " " << seq[3]
                                  << ": frequency " << f << ", probability " << p;
  }
  for (const auto& [seq, count] : seen) EXPECT_TRUE(exact.count(seq)) << "a sequence of probability 0 was generated";
  std::printf("[draft] largest |f - p| / bound: %.3f\n", worst);
}

TEST(InferSpeculativeDraft, AnotherVocabularyIsRefused) {
  const models::Model target = models::random_model(draft_test_config(32, 1, 256), 1);
  const models::Model draft = models::random_model(draft_test_config(32, 1, 512), 2);
  try {
    check_draft_vocabulary(target, nullptr, "big.gguf", draft, nullptr, "small.gguf", "infer");
    FAIL() << "not refused";
  } catch (const Error& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("[infer] the draft model small.gguf does not share the vocabulary of big.gguf"), std::string::npos)
        << m;
    EXPECT_NE(m.find("512"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  EXPECT_NO_THROW(check_draft_vocabulary(target, nullptr, "big.gguf", target, nullptr, "small.gguf", "infer"));
}

}  // namespace
}  // namespace anelab::infer
