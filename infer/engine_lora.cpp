// The CPU engine's runtime LoRA adapters (Engine::add_lora): y += c * (alpha / r) * B (A x) next to each adapted base
// product, per row with the scales of the row's slot, so that the server switches adapters per request without
// reloading or re-merging the base (llama.cpp's server does the same with its per-request `lora` field).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/core/error.h"
#include "infer/engine.h"

namespace anelab::infer {

int64_t Engine::add_lora(models::LoraAdapter a) {
  const int64_t nl = static_cast<int64_t>(desc_.layers.size());
  ANELAB_CHECK(a.rank > 0 && !a.pairs.empty(), "infer", "an adapter needs a positive rank and at least one tensor");
  const int64_t id = lora_count();
  std::vector<int64_t> at(static_cast<size_t>(nl * kLoraSites), -1);  // index into a.pairs
  for (size_t pi = 0; pi < a.pairs.size(); ++pi) {
    const models::LoraPair& p = a.pairs[pi];
    int64_t where = -1;
    for (int64_t l = 0; l < nl && where < 0; ++l)
      for (const models::Step& s : desc_.layers[static_cast<size_t>(l)].steps) {
        const std::string* names[kLoraSites] = {};
        if (s.kind == models::StepKind::kAttention) {
          names[0] = &s.attn.wq, names[1] = &s.attn.wk, names[2] = &s.attn.wv, names[3] = &s.attn.wo;
        } else if (s.kind == models::StepKind::kFfn) {
          names[4] = &s.ffn.w_in, names[5] = &s.ffn.w_up, names[6] = &s.ffn.w_out;
        } else if (s.kind == models::StepKind::kLinearAttention) {
          names[7] = &s.deltanet.w_qkv, names[8] = &s.deltanet.w_z, names[9] = &s.deltanet.w_b;
          names[10] = &s.deltanet.w_a, names[11] = &s.deltanet.w_out;
        }
        for (int64_t k = 0; k < kLoraSites; ++k)
          if (names[k] && !names[k]->empty() && *names[k] == p.tensor) where = l * kLoraSites + k;
      }
    if (where < 0)
      fail(
          "infer", "adapter ", id, ": tensor ", p.tensor,
          " is not a projection the engine adapts (q, k, v, o of an attention step; gate, up, down of an FFN step; the "
          "five projections of a Gated DeltaNet step)");
    const models::Tensor& t = model_.tensor(p.tensor);
    if (t.shape != std::vector<int64_t>{p.out, p.in} || static_cast<int64_t>(p.a.size()) != a.rank * p.in ||
        static_cast<int64_t>(p.b.size()) != p.out * a.rank)
      fail("infer", "adapter ", id, ": tensor ", p.tensor, " of the model is ", t.shape_str(), ", the adapter's A [",
           a.rank, ", ", p.in, "] and B [", p.out, ", ", a.rank, "] do not fit it");
    at[static_cast<size_t>(where)] = static_cast<int64_t>(pi);
  }
  const models::LoraAdapter& kept = loras_.emplace_back(std::move(a));  // a deque: earlier adapters stay in place
  for (const int64_t pi : at) lora_pair_.push_back(pi < 0 ? nullptr : &kept.pairs[static_cast<size_t>(pi)]);
  lora_rank_max_ = std::max(lora_rank_max_, kept.rank);
  lora_t_.grow(rows_ * lora_rank_max_);
  for (std::vector<float>& c : lora_scale_) c.resize(loras_.size(), 0.0f);
  return id;
}

void Engine::set_lora_scales(int64_t slot, std::span<const float> scales) {
  ANELAB_CHECK(slot >= 0 && slot < opt_.slots, "infer", "slot ", slot, " outside the engine's ", opt_.slots, " slots");
  ANELAB_CHECK(static_cast<int64_t>(scales.size()) == lora_count(), "infer", scales.size(), " LoRA scales for ",
               lora_count(), " adapters");
  for (size_t j = 0; j < scales.size(); ++j)
    ANELAB_CHECK(std::isfinite(scales[j]), "infer", "LoRA scale of adapter ", j, " is ", scales[j], " (not finite)");
  std::vector<float>& c = lora_scale_[static_cast<size_t>(slot)];
  c.assign(scales.begin(), scales.end());
}

std::span<const float> Engine::lora_scales(int64_t slot) const {
  ANELAB_CHECK(slot >= 0 && slot < opt_.slots, "infer", "slot ", slot, " outside the engine's ", opt_.slots, " slots");
  return lora_scale_[static_cast<size_t>(slot)];
}

bool Engine::lora_on(int64_t slot) const {
  for (float c : lora_scale_[static_cast<size_t>(slot)])
    if (c != 0.0f) return true;
  return false;
}

void Engine::lora_apply(int64_t l, LoraSite site, const float* x, int64_t n, float* y) {
  if (loras_.empty()) return;
  const int64_t nl = static_cast<int64_t>(desc_.layers.size()), na = lora_count();
  auto row = [&](int64_t i) {
    const int64_t slot = batch_slot_.empty() ? slot_ : batch_slot_[static_cast<size_t>(i)];
    const std::vector<float>& c = lora_scale_[static_cast<size_t>(slot)];
    for (int64_t j = 0; j < na; ++j) {
      const models::LoraPair* p = lora_pair_[static_cast<size_t>((j * nl + l) * kLoraSites + int64_t(site))];
      if (!p || c[static_cast<size_t>(j)] == 0.0f) continue;
      const models::LoraAdapter& ad = loras_[static_cast<size_t>(j)];
      const int64_t r = ad.rank;
      const float k = c[static_cast<size_t>(j)] * ad.scale();
      float* t = lora_t_.data() + i * lora_rank_max_;
      const float* xi = x + i * p->in;
      for (int64_t q = 0; q < r; ++q) t[q] = dot(p->a.data() + q * p->in, xi, p->in);  // A x [r]
      float* yi = y + i * p->out;
      for (int64_t o = 0; o < p->out; ++o) yi[o] += k * dot(p->b.data() + o * r, t, r);  // + k * B (A x)
    }
  };
  if (n >= 4)
    pool_.parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) row(i);
    });
  else
    for (int64_t i = 0; i < n; ++i) row(i);
}

}  // namespace anelab::infer
