#include "train/lora.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

#include "framework/core/error.h"
#include "models/arch/arch.h"

namespace anelab::train {

const char* lora_target_name(LoraTarget t) {
  switch (t) {
    case LoraTarget::kQ:
      return "q";
    case LoraTarget::kK:
      return "k";
    case LoraTarget::kV:
      return "v";
    case LoraTarget::kO:
      return "o";
    case LoraTarget::kGate:
      return "gate";
    case LoraTarget::kUp:
      return "up";
    case LoraTarget::kDown:
      return "down";
    case LoraTarget::kLinQkv:
      return "lin_qkv";
    case LoraTarget::kLinZ:
      return "lin_z";
    case LoraTarget::kLinB:
      return "lin_b";
    case LoraTarget::kLinA:
      return "lin_a";
    case LoraTarget::kLinOut:
      return "lin_out";
  }
  return "?";
}

std::array<bool, kLoraTargets> parse_lora_targets(const std::string& list) {
  std::array<bool, kLoraTargets> t{};
  size_t pos = 0;
  bool any = false;
  while (pos <= list.size()) {
    const size_t end = std::min(list.find(',', pos), list.size());
    const std::string name = list.substr(pos, end - pos);
    int found = -1;
    for (int i = 0; i < kLoraTargets; ++i)
      if (name == lora_target_name(LoraTarget(i))) found = i;
    if (found < 0)
      fail("train", "--lora-targets '", list, "': unknown module '", name, "' (a comma list of ", kLoraAllTargets, ")");
    t[size_t(found)] = any = true;
    pos = end + 1;
  }
  if (!any) fail("train", "--lora-targets '", list, "': no module named");
  return t;
}

std::string lora_targets_text(const std::array<bool, kLoraTargets>& t) {
  std::string s;
  for (int i = 0; i < kLoraTargets; ++i)
    if (t[size_t(i)]) s += (s.empty() ? "" : ",") + std::string(lora_target_name(LoraTarget(i)));
  return s;
}

LoraLayout::LoraLayout(const models::ModelConfig& c, const LoraConfig& lc) : lc_(lc) {
  if (lc.rank <= 0) fail("train", "--lora-rank ", lc.rank, ": must be > 0");
  const models::ModelDesc d = models::describe_model(c);
  const int64_t L = int64_t(d.layers.size()), r = lc.rank;
  index_.assign(size_t(L * kLoraTargets), -1);
  for (int64_t l = 0; l < L; ++l) {
    auto add = [&](LoraTarget t, int64_t in, int64_t out) {
      if (!lc.targets[size_t(t)]) return;
      int64_t& ix = index_[size_t(l * kLoraTargets + int(t))];
      if (ix >= 0)
        fail("train", "layer ", l, " has two '", lora_target_name(t), "' projections: LoRA cannot name them");
      ix = int64_t(slots_.size());
      LoraSlot s{l, t, in, out, total_, total_ + r * in};
      const std::string base = "layers." + std::to_string(l) + "." + lora_target_name(t);
      params_.push_back({base + ".lora_A", {r, in}, s.a, r * in, true});
      params_.push_back({base + ".lora_B", {out, r}, s.b, out * r, true});
      total_ += r * (in + out);
      slots_.push_back(s);
    };
    for (const models::Step& st : d.layers[size_t(l)].steps) {
      switch (st.kind) {
        case models::StepKind::kAttention: {
          const int64_t QD = st.attn.n_heads * st.attn.head_dim, KD = st.attn.n_kv_heads * st.attn.head_dim;
          // (with an output gate, q_proj's rows are per head [q | gate]: the adapter covers them all, as PEFT's)
          add(LoraTarget::kQ, d.dim, st.attn.output_gate ? 2 * QD : QD), add(LoraTarget::kK, d.dim, KD);
          add(LoraTarget::kV, d.dim, KD);
          add(LoraTarget::kO, QD, d.dim);
          break;
        }
        case models::StepKind::kFfn:
          add(LoraTarget::kGate, d.dim, st.ffn.hidden), add(LoraTarget::kUp, d.dim, st.ffn.hidden);
          add(LoraTarget::kDown, st.ffn.hidden, d.dim);
          break;
        case models::StepKind::kLinearAttention: {
          const models::DeltaNetDesc& n = st.deltanet;
          const int64_t V = n.n_v_heads * n.v_dim;
          add(LoraTarget::kLinQkv, d.dim, n.conv_dim()), add(LoraTarget::kLinZ, d.dim, V);
          add(LoraTarget::kLinB, d.dim, n.n_v_heads), add(LoraTarget::kLinA, d.dim, n.n_v_heads);
          add(LoraTarget::kLinOut, V, d.dim);
          break;
        }
      }
    }
  }
  if (slots_.empty()) fail("train", "--lora-targets ", lora_targets_text(lc.targets), ": the model has none of them");
}

namespace {
// The canonical tensor (models/formats/model.h names) a target adapts in layer l.
std::string lora_base_tensor(int64_t l, LoraTarget t) {
  const char* n = "";
  switch (t) {
    case LoraTarget::kQ:
      n = "wq";
      break;
    case LoraTarget::kK:
      n = "wk";
      break;
    case LoraTarget::kV:
      n = "wv";
      break;
    case LoraTarget::kO:
      n = "wo";
      break;
    case LoraTarget::kGate:
      n = "w1";
      break;
    case LoraTarget::kUp:
      n = "w3";
      break;
    case LoraTarget::kDown:
      n = "w2";
      break;
    case LoraTarget::kLinQkv:
      n = "ssm_qkv";
      break;
    case LoraTarget::kLinZ:
      n = "ssm_z";
      break;
    case LoraTarget::kLinB:
      n = "ssm_b";
      break;
    case LoraTarget::kLinA:
      n = "ssm_a";
      break;
    case LoraTarget::kLinOut:
      n = "ssm_out";
      break;
  }
  return "layers." + std::to_string(l) + "." + n;
}
}  // namespace

void lora_merge(const ParamLayout& layout, const LoraLayout& l, const float* adapters, float s, float* w) {
  lora_merge_range(layout, l, adapters, s, 0, layout.total(), w);
}

void lora_merge_range(const ParamLayout& layout, const LoraLayout& l, const float* adapters, float s, int64_t off,
                      int64_t n, float* out) {
  const int64_t r = l.lora().rank;
  for (const LoraSlot& sl : l.slots()) {
    const ParamInfo& p = layout.find(lora_base_tensor(sl.layer, sl.target));
    if (p.numel != sl.in * sl.out)
      fail("train", "LoRA ", p.name, ": adapter shape [", sl.out, ", ", sl.in, "] does not fit the tensor");
    const int64_t e0 = std::max(off, p.offset) - p.offset, e1 = std::min(off + n, p.offset + p.numel) - p.offset;
    if (e0 >= e1) continue;  // W [out, in] elements [e0, e1) are in the range
    float* W = out + (p.offset - off);
    const float* A = adapters + sl.a;
    const float* B = adapters + sl.b;
    for (int64_t o = e0 / sl.in; o * sl.in < e1; ++o)
      for (int64_t i = std::max<int64_t>(0, e0 - o * sl.in); i < std::min(sl.in, e1 - o * sl.in); ++i) {
        float acc = 0;
        for (int64_t k = 0; k < r; ++k) acc += B[o * r + k] * A[k * sl.in + i];
        W[o * sl.in + i] += s * acc;
      }
  }
}

models::LoraAdapter to_lora_adapter(const LoraLayout& l, const float* w, const std::string& base_model) {
  models::LoraAdapter a;
  a.rank = l.lora().rank, a.alpha = float(l.lora().alpha), a.base_model = base_model;
  for (const LoraSlot& s : l.slots())
    a.pairs.push_back({lora_base_tensor(s.layer, s.target), s.in, s.out,
                       std::vector<float>(w + s.a, w + s.a + l.lora().rank * s.in),
                       std::vector<float>(w + s.b, w + s.b + s.out * l.lora().rank)});
  return a;
}

}  // namespace anelab::train
