#include "train/lora_run.h"

#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/formats/checkpoint_file.h"
#include "models/formats/safetensors.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/data.h"

namespace anelab::train {

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

LoraEngine::LoraEngine(const ParamLayout& layout, FrozenBase base, const LoraLayout& lora, uint64_t seed)
    : model_(std::make_unique<CpuModel>(layout)), base_(std::move(base)), lora_(&lora), seed_(seed) {
  if (!base_.dense_data()) model_->set_base(&base_);  // held in its own types: the model reads it (w is ignored)
}

double LoraEngine::forward_backward(const float* w, const Batch& b, float grad_scale, float* grads, StepTimes* t) {
  if (steps_) {  // the kernel engine draws micro-batch micro_'s dropout masks (make_kernel_lora_engine's micro_batch)
    const double loss = steps_->forward_backward(w, b, grad_scale, grads, t);
    ++micro_;
    return loss;
  }
  LoraStep st{lora_, w, grads, seed_, micro_++, true};
  model_->set_lora(&st);
  CpuTimes ct;
  const double loss = model_->forward_backward(base_.dense_data(), b, grad_scale, nullptr, &ct);
  model_->set_lora(nullptr);
  if (t) t->cpu_dw += ct.dw, t->fwd += ct.fwd, t->bwd += ct.bwd, t->cls += ct.cls;
  return loss;
}

int64_t LoraEngine::activation_bytes(int64_t B, int64_t T) {
  if (steps_) return steps_->activation_bytes(B, T);
  LoraStep st{lora_, nullptr, nullptr, seed_, 0, true};  // a training step's buffers (dropout's too)
  model_->set_lora(&st);
  const int64_t n = model_->activation_bytes(B, T);
  model_->set_lora(nullptr);
  return n;
}

double LoraEngine::loss(const float* w, const Batch& b) {
  LoraStep st{lora_, w, nullptr, seed_, 0, false};
  model_->set_lora(&st);
  const double v = model_->loss(base_.dense_data(), b);
  model_->set_lora(nullptr);
  return v;
}

}  // namespace anelab::train
