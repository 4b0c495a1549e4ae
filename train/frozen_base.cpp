#include "train/frozen_base.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "framework/core/error.h"
#include "models/arch/arch.h"

namespace anelab::train {

FrozenBase::FrozenBase(const ParamLayout& layout, std::vector<float> w) : layout_(layout), f32_(std::move(w)) {
  if (int64_t(f32_.size()) != layout_.total())
    fail("train", "frozen base of ", f32_.size(), " weights for a layout of ", layout_.total());
  for (const ParamInfo& p : layout_.params()) held_.push_back({p.offset, p.numel, p.offset, {}});
}

FrozenBase::FrozenBase(const ParamLayout& layout, const models::Model& m) : layout_(layout) {
  const models::ModelConfig& c = layout_.config();
  bool linear = false;
  for (int64_t l = 0; l < c.n_layers; ++l) linear = linear || c.linear_layer(l);
  if (linear) {  // the DeltaNet steps read their weights as fp32 pointers into the layout
    *this = FrozenBase(layout, init_from_model(layout, m));
    return;
  }
  if (!(m.config == c)) fail("train", "init model ", m.source_path, " has a different config");
  // The matrices CpuModel multiplies by (project / project_backward, the embedding rows and the classifier).
  const models::ModelDesc d = models::describe_model(c);
  std::set<std::string> products = {d.embed.tokens, d.head.weight};
  for (const models::LayerDesc& ld : d.layers)
    for (const models::Step& s : ld.steps) {
      if (s.kind == models::StepKind::kAttention) products.insert({s.attn.wq, s.attn.wk, s.attn.wv, s.attn.wo});
      if (s.kind == models::StepKind::kFfn) products.insert({s.ffn.w_in, s.ffn.w_up, s.ffn.w_out});
    }
  int64_t small = 0;
  for (const ParamInfo& p : layout_.params()) small += products.count(p.name) ? 0 : p.numel;
  f32_.resize(size_t(small));
  int64_t at = 0;
  for (const ParamInfo& p : layout_.params()) {
    const models::Tensor& t = m.tensor(p.name);
    if (t.shape != p.shape)
      fail("train", "init model ", m.source_path, ": tensor ", p.name, " has shape ", t.shape_str(), ", expected ",
           models::shape_string(p.shape));
    if (products.count(p.name)) {
      typed_.push_back(int64_t(held_.size()));
      held_.push_back({p.offset, p.numel, -1, t});
      continue;
    }
    t.to_f32(0, p.numel, f32_.data() + at);
    held_.push_back({p.offset, p.numel, at, {}});
    at += p.numel;
  }
}

const FrozenBase::Held& FrozenBase::held_at(int64_t off) const {
  auto it = std::upper_bound(held_.begin(), held_.end(), off, [](int64_t o, const Held& h) { return o < h.off; });
  if (it == held_.begin() || off >= layout_.total()) fail("train", "frozen base: offset ", off, " outside the layout");
  return *--it;
}

const models::Tensor* FrozenBase::typed(int64_t off) const {
  const Held& h = held_at(off);
  return h.f32 < 0 ? &h.t : nullptr;
}

const float* FrozenBase::f32(int64_t off) const {
  const Held& h = held_at(off);
  if (h.f32 < 0) fail("train", "frozen base: tensor ", h.t.name, " is held as ", models::dtype_name(h.t.dtype));
  return f32_.data() + h.f32 + (off - h.off);
}

void FrozenBase::to_f32(int64_t off, int64_t n, float* out) const {
  while (n > 0) {
    const Held& h = held_at(off);
    const int64_t begin = off - h.off, count = std::min(n, h.numel - begin);
    if (h.f32 >= 0) {
      std::memcpy(out, f32_.data() + h.f32 + begin, size_t(count) * sizeof(float));
    } else {  // block types convert whole blocks: the blocks covering the range, then the range of them
      const int64_t blk = models::dtype_block(h.t.dtype);
      const int64_t b0 = begin / blk * blk, b1 = std::min(h.numel, (begin + count + blk - 1) / blk * blk);
      if (b0 == begin && b1 == begin + count) {
        h.t.to_f32(begin, count, out);
      } else {
        std::vector<float> tmp(size_t(b1 - b0));
        h.t.to_f32(b0, b1 - b0, tmp.data());
        std::memcpy(out, tmp.data() + (begin - b0), size_t(count) * sizeof(float));
      }
    }
    off += count, n -= count, out += count;
  }
}

std::vector<float> FrozenBase::to_f32() const {
  std::vector<float> w(size_t(layout_.total()));
  to_f32(0, layout_.total(), w.data());
  return w;
}

int64_t FrozenBase::held_bytes() const {
  int64_t n = int64_t(f32_.size() * sizeof(float));
  for (int64_t i : typed_) n += held_[size_t(i)].t.nbytes;  // (a tied classifier is the embedding: one tensor)
  return n;
}

std::string FrozenBase::types() const {
  std::map<std::string, int64_t> bytes;
  if (!f32_.empty()) bytes["fp32"] += int64_t(f32_.size() * sizeof(float));
  for (int64_t i : typed_) bytes[models::dtype_name(held_[size_t(i)].t.dtype)] += held_[size_t(i)].t.nbytes;
  std::vector<std::pair<int64_t, std::string>> order;
  for (const auto& [name, b] : bytes) order.push_back({-b, name});
  std::sort(order.begin(), order.end());
  std::string s;
  for (const auto& [b, name] : order) s += (s.empty() ? "" : " + ") + name;
  return s;
}

}  // namespace anelab::train
