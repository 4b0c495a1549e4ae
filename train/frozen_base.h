// The frozen base of `anelab train --lora --strategy cpu` (QLoRA, Dettmers et al. 2023: the base stays in its
// quantized storage, only the adapters are fp32): every matrix the CPU executor multiplies by (the attention and FFN
// projections, the embedding table and the classifier) kept in the model file's type (fp32, fp16, bf16 or a GGUF
// block type) as the loaded model's tensors (views of its bytes: no copy), the small tensors (norms) in fp32. Never
// dequantized whole: CpuModel (train/cpu_model.h set_base) converts tiles of a matrix to fp32 as its products need
// them (train/cpu_linalg.h), with the dequantization inference uses (models::Tensor::to_f32).
// A model with Gated DeltaNet layers (whose weights the CPU executor reads as fp32 pointers) and a base made from fp32
// weights (a --preset's random init; the kernel strategies) are held dense: [P] fp32 in the layout (dense_data()).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/formats/model.h"
#include "train/params.h"

namespace anelab::train {

class FrozenBase {
 public:
  // fp32 weights [P] in the layout, held as given (dense).
  FrozenBase(const ParamLayout& layout, std::vector<float> w);
  // The model's tensors (m's config must be the layout's; shapes checked as init_from_model does): the product
  // matrices as views of m's tensors in their own types, the rest converted to fp32; dense (init_from_model) for a
  // model with linear-attention layers.
  FrozenBase(const ParamLayout& layout, const models::Model& m);

  const ParamLayout& layout() const { return layout_; }
  // [P] fp32 at the layout's offsets when held dense, else nullptr.
  const float* dense_data() const { return typed_.empty() ? f32_.data() : nullptr; }
  // The matrix at layout offset `off` when held as a tensor of its own (any type), else nullptr (held in fp32).
  const models::Tensor* typed(int64_t off) const;
  // The fp32 values of the tensor at layout offset `off` (not a typed one: throws naming it).
  const float* f32(int64_t off) const;
  // The weights [off, off + n) of the layout in fp32 (any range, tensors cut at its ends).
  void to_f32(int64_t off, int64_t n, float* out) const;
  std::vector<float> to_f32() const;  // [P]: every weight (a merged model, sampling)
  // Bytes held: the typed tensors' own bytes (the file's) plus the fp32 ones.
  int64_t held_bytes() const;
  // The types held, by bytes, e.g. "bf16 + fp32" or "q4_k + q6_k + fp32" (the memory event).
  std::string types() const;

 private:
  struct Held {
    int64_t off = 0, numel = 0;  // in the layout
    int64_t f32 = -1;            // offset in f32_, or -1: in `t`
    models::Tensor t;            // typed: the model's tensor (its owner keeps the bytes alive)
  };
  const Held& held_at(int64_t off) const;  // the tensor holding layout element off

  ParamLayout layout_;
  std::vector<Held> held_;      // every layout tensor, in layout order
  std::vector<int64_t> typed_;  // indices into held_ of the typed ones
  std::vector<float> f32_;      // the fp32-held tensors, packed in layout order ([P] when dense)
};

}  // namespace anelab::train
