// A seeded LoRA adapter for the tests of adapter files and runtime adapters: rank `rank`, alpha `alpha`, on every
// projection (wq wk wv wo w1 w2 w3, and a Gated DeltaNet's ssm_qkv ssm_z ssm_b ssm_a ssm_out) of every layer of `c`,
// A and B uniform in [-amplitude / 2, amplitude / 2) from a 64-bit LCG of `seed` (B non-zero: the adapter changes
// the model).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "models/arch/tensors.h"
#include "models/io/adapter.h"

namespace anelab::test {

inline models::LoraAdapter seeded_lora_adapter(const models::ModelConfig& c, int64_t rank, float alpha, uint64_t seed,
                                               float amplitude) {
  models::LoraAdapter a;
  a.rank = rank, a.alpha = alpha;
  uint64_t s = seed;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return float(double(s >> 11) * 0x1.0p-53 - 0.5) * amplitude;
  };
  for (const models::TensorSpec& t : models::canonical_tensors(c)) {
    const std::string leaf = t.name.substr(t.name.rfind('.') + 1);
    if (!t.name.starts_with("layers.") || t.shape.size() != 2 ||
        !(leaf == "wq" || leaf == "wk" || leaf == "wv" || leaf == "wo" || leaf == "w1" || leaf == "w2" ||
          leaf == "w3" || leaf == "ssm_qkv" || leaf == "ssm_z" || leaf == "ssm_b" || leaf == "ssm_a" ||
          leaf == "ssm_out"))
      continue;
    models::LoraPair p{t.name, t.shape[1], t.shape[0], {}, {}};
    for (int64_t i = 0; i < a.rank * p.in; ++i) p.a.push_back(next());
    for (int64_t i = 0; i < p.out * a.rank; ++i) p.b.push_back(next());
    a.pairs.push_back(std::move(p));
  }
  return a;
}

}  // namespace anelab::test
