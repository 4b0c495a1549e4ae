// The workloads of `anelab bench emulator`, `anelab probe` and `anelab demo kernel`, built in one place:
// MIL programs with seeded random weights, a random transformer layer's weights, and seeded random
// inputs. Every value is drawn from N(0, sd) with a fixed seed, so two runs (or the emulator and ANE
// halves of the probe) see the same numbers.
//
//   conv1x1            x [1, cin, 1, S] fp16 -> 1x1 conv with a const weight [cout, cin, 1, 1] (sd 1/sqrt(cin))
//   conv1x1_int8       the same weights as int8 per output channel (w8.h, constexpr_affine_dequantize); with
//                      w8a8 x also goes through quantize/dequantize at scale 2^-4 (N(0, 1) inputs stay
//                      below its saturation at 127 / 16 ~ 7.9)
//   attention_core     q, k, v [1, H, S, HD] fp16 inputs -> softmax(q·kᵀ/sqrt(HD) + causal mask)·v
//   build_attention    x [1, D, 1, S] -> Wq/Wk/Wv, heads, causal attention, merged heads, Wo ([D, D] each)
//   dispatch           identity over [1, 32, 1, 64]: an evaluation with almost no work
//   conv_chain         x [1, C, 1, S] -> n 1x1 convs C -> C in a row (distinct weights, sd 1/sqrt(C)): a working
//                      set of n·C·C fp16 weights (`anelab probe`'s sram section)
//   training kernels   kern::build_kernel (train.h) over RandomLayer weights
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "framework/kernels/train.h"
#include "framework/mil/ir.h"
#include "framework/runtime/surface.h"
#include "framework/runtime/weights.h"

namespace anelab::kern {

struct Workload {
  std::string name;
  mil::Program program;
  rt::Weights weights;
  double flops = 0;  // GEMM flops (conv and matmul) of one evaluation
};

// n values of N(mean, sd) from a generator seeded with `seed`.
std::vector<float> random_normal(size_t n, uint32_t seed, float sd, float mean = 0.0f);

Workload conv1x1_workload(int64_t cin, int64_t cout, int64_t seq);
Workload conv1x1_int8_workload(int64_t cin, int64_t cout, int64_t seq, bool w8a8);
// The same conv with 4-bit weights (ios18 forms, one uint4 blob), quantized here from the same random matrix:
//   kUint4       constexpr_affine_dequantize, per output channel: scale = max|w| / 7, zero_point 8;
//   kBlock32     constexpr_blockwise_shift_scale, blocks of 32 input channels: scale = max|w| / 7, offset 8
//                (the layout of a GGUF Q4_0 block);
//   kLut4        constexpr_lut_to_dense, one 16-entry LUT per output channel: 16 evenly spaced values from the
//                row's min to its max, each weight its nearest entry (not k-means).
enum class FourBitForm : uint8_t { kUint4, kBlock32, kLut4 };
Workload conv1x1_4bit_workload(int64_t cin, int64_t cout, int64_t seq, FourBitForm form);
// The same conv palettized to 6 bits (lut6): k-means tables of 64 fp16 entries, one per output channel
// (quant::palettize), through constexpr_lut_to_dense with uint6 indices (BlobSet::lut_matrix).
Workload conv1x1_lut6_workload(int64_t cin, int64_t cout, int64_t seq);
Workload attention_core_workload(int64_t heads, int64_t seq, int64_t head_dim);
Workload attention_block_workload(int64_t dim, int64_t heads, int64_t seq);
Workload dispatch_workload();
Workload conv_chain_workload(int64_t channels, int64_t seq, int n);

// The weights of one random transformer layer of shape s: matrices N(0, 1/sqrt(fan_in)), norm weights
// N(1, 0.1). `w` views the owned storage.
struct RandomLayer {
  std::vector<float> wq, wk, wv, wo, w1, w2, w3, rms_att, rms_ffn;
  LayerWeights w;
  explicit RandomLayer(const TrainShape& s, uint32_t seed = 1);
  RandomLayer(const RandomLayer&) = delete;
  RandomLayer& operator=(const RandomLayer&) = delete;
};

// The training layer shape of `anelab probe`: head dim 64, every width a multiple of 64 (the references'
// shapes), small enough for the emulator.
TrainShape probe_layer_shape();
// GEMM flops of one evaluation of a training kernel at shape s (elementwise work not counted).
double kernel_flops(KernelKind k, const TrainShape& s);
// The programs `anelab probe` runs: conv1x1 768->2048 S=256 (fp16, int8 weights, w8a8), build_attention D=768 12 heads
// S=256, dispatch, conv_chain 1024 S=64 (two convs; the sram section runs up to 32), and each training kernel at
// probe_layer_shape() (dynamic strategy).
std::vector<Workload> probe_workloads();

// Writes N(0, 1) values into every input surface (seed 1000 + the input's index).
void fill_random_inputs(std::vector<rt::Surface>& inputs);

}  // namespace anelab::kern
