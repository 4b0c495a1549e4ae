#include "train/lora.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/arch/arch.h"
#include "models/formats/checkpoint_file.h"
#include "models/formats/safetensors.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/cpu_model.h"
#include "train/data.h"

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
      fail("train", "--lora-targets '", list, "': unknown module '", name, "' (a comma list of q,k,v,o,gate,up,down)");
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
          add(LoraTarget::kQ, d.dim, QD), add(LoraTarget::kK, d.dim, KD), add(LoraTarget::kV, d.dim, KD);
          add(LoraTarget::kO, QD, d.dim);
          break;
        }
        case models::StepKind::kFfn:
          add(LoraTarget::kGate, d.dim, st.ffn.hidden), add(LoraTarget::kUp, d.dim, st.ffn.hidden);
          add(LoraTarget::kDown, st.ffn.hidden, d.dim);
          break;
        case models::StepKind::kLinearAttention:  // refused by the CPU executor (CpuModel::plan)
          break;
      }
    }
  }
  if (slots_.empty()) fail("train", "--lora-targets ", lora_targets_text(lc.targets), ": the model has none of them");
}

std::vector<float> lora_init(const LoraLayout& l, uint64_t seed) {
  std::vector<float> w(size_t(l.total()), 0.0f);
  Rng rng{seed ^ 0x4C6F5241ull};  // "LoRA"
  for (const LoraSlot& s : l.slots()) {
    // PEFT: nn.init.kaiming_uniform_(A, a=sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / in) = 1/sqrt(in)
    const double bound = 1.0 / std::sqrt(double(s.in));
    for (int64_t i = 0; i < l.lora().rank * s.in; ++i) {
      const double u = double(rng.next() >> 11) * 0x1.0p-53;
      w[size_t(s.a + i)] = float((2.0 * u - 1.0) * bound);
    }
  }
  return w;
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
  }
  return "layers." + std::to_string(l) + "." + n;
}
}  // namespace

void lora_merge(const ParamLayout& layout, const LoraLayout& l, const float* adapters, float s, float* w) {
  const int64_t r = l.lora().rank;
  for (const LoraSlot& sl : l.slots()) {
    const ParamInfo& p = layout.find(lora_base_tensor(sl.layer, sl.target));
    if (p.numel != sl.in * sl.out)
      fail("train", "LoRA ", p.name, ": adapter shape [", sl.out, ", ", sl.in, "] does not fit the tensor");
    float* W = w + p.offset;
    const float* A = adapters + sl.a;
    const float* B = adapters + sl.b;
    for (int64_t o = 0; o < sl.out; ++o)
      for (int64_t i = 0; i < sl.in; ++i) {
        float acc = 0;
        for (int64_t k = 0; k < r; ++k) acc += B[o * r + k] * A[k * sl.in + i];
        W[o * sl.in + i] += s * acc;
      }
  }
}

void write_lora_state(const std::string& path, const LoraLayout& l, const std::vector<float>& w,
                      const std::vector<float>& m, const std::vector<float>& v) {
  std::vector<models::StWrite> t;
  for (const auto& [prefix, src] :
       {std::pair<const char*, const std::vector<float>*>{"", &w}, {"adam_m.", &m}, {"adam_v.", &v}})
    for (const ParamInfo& p : l.params()) {
      const auto* b = reinterpret_cast<const uint8_t*>(src->data() + p.offset);
      t.push_back({prefix + p.name, "F32", p.shape, std::vector<uint8_t>(b, b + p.numel * 4)});
    }
  const std::vector<uint8_t> img = models::build_safetensors(t);
  write_file_atomic(path, img.data(), img.size());
}

void read_lora_state(const std::string& path, const LoraLayout& l, std::vector<float>* w, std::vector<float>* m,
                     std::vector<float>* v) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(read_file_bytes(path));
  const models::StTensorMap map = models::parse_safetensors(bytes->data(), bytes->size(), bytes, path);
  for (const auto& [prefix, dst] :
       {std::pair<const char*, std::vector<float>*>{"", w}, {"adam_m.", m}, {"adam_v.", v}}) {
    dst->assign(size_t(l.total()), 0.0f);
    for (const ParamInfo& p : l.params()) {
      const auto it = map.find(prefix + p.name);
      if (it == map.end())
        fail("train", path, ": no tensor ", prefix, p.name, " (another --lora-rank or --lora-targets?)");
      if (it->second.dtype != models::DType::kF32 || it->second.shape != p.shape)
        fail("train", path, ": tensor ", prefix, p.name, " is not F32 of the adapter's shape");
      std::memcpy(dst->data() + p.offset, it->second.data, size_t(p.numel) * 4);
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

namespace {
// The run directory of RUN (a directory, or a checkpoint file in one) and its saved configuration.
TrainConfig lora_run_config(const std::string& run, std::string* ckpt) {
  *ckpt = models::checkpoint_path(run);
  const std::string cj = (std::filesystem::path(*ckpt).parent_path() / "config.json").string();
  TrainConfig c;
  if (std::filesystem::exists(cj)) apply_json(c, nlohmann::json::parse(read_file_text(cj)));
  return c;
}
}  // namespace

bool is_lora_run(const std::string& run) {
  std::string ckpt;
  return lora_run_config(run, &ckpt).lora;
}

void export_run_adapter(const std::string& run, const std::string& out) {
  std::string ckpt;
  const TrainConfig c = lora_run_config(run, &ckpt);
  if (!c.lora) fail("train", run, ": not a --lora run (its config.json has no lora = true): no adapter to export");
  const models::CheckpointHeader h = read_checkpoint(ckpt);
  LoraConfig lc;
  lc.rank = c.lora_rank, lc.alpha = c.lora_alpha, lc.dropout = c.lora_dropout;
  lc.targets = parse_lora_targets(c.lora_targets);
  const LoraLayout l(h.model, lc);
  std::vector<float> w, m, v;
  const std::filesystem::path cp(ckpt);
  read_lora_state((cp.parent_path() / (cp.stem().string() + ".lora")).string(), l, &w, &m, &v);
  const models::LoraAdapter a = to_lora_adapter(l, w.data(), !c.preset.empty() ? c.preset : c.init);
  if (out.ends_with(".gguf"))
    models::write_gguf_adapter(a, h.model, out);
  else
    models::write_peft_adapter(a, h.model, out);
}

LoraEngine::LoraEngine(const ParamLayout& layout, std::vector<float> base, const LoraLayout& lora, uint64_t seed)
    : model_(std::make_unique<CpuModel>(layout)), base_(std::move(base)), lora_(&lora), seed_(seed) {}

double LoraEngine::forward_backward(const float* w, const Batch& b, float grad_scale, float* grads, StepTimes* t) {
  LoraStep st{lora_, w, grads, seed_, micro_++, true};
  model_->set_lora(&st);
  CpuTimes ct;
  const double loss = model_->forward_backward(base_.data(), b, grad_scale, nullptr, &ct);
  model_->set_lora(nullptr);
  if (t) t->cpu_dw += ct.dw, t->fwd += ct.fwd, t->bwd += ct.bwd, t->cls += ct.cls;
  return loss;
}

double LoraEngine::loss(const float* w, const Batch& b) {
  LoraStep st{lora_, w, nullptr, seed_, 0, false};
  model_->set_lora(&st);
  const double v = model_->loss(base_.data(), b);
  model_->set_lora(nullptr);
  return v;
}

}  // namespace anelab::train
