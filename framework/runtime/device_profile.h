// Device profiles: the documented limits of each ANE generation (../shared/reference/ane_digest.md
// §2.6, §4.3, §4.4, §1.11), enforced by every backend at compile time (check_program) and at
// evaluate time (check_surfaces), with messages that name the function, value, op and limit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/mil/ir.h"

namespace anelab::rt {

class Surface;

// How the MIL kernels bake their weight matrices (docs/quantization.md "On the ANE"):
//   kFp16  fp16 BLOBFILE consts (the reference);
//   kW8    int8 per-output-channel weights through constexpr_affine_dequantize (fp16 at compile time);
//   kW8A8  kW8 plus quantize/dequantize (int8) around every conv input: the form MDX ane_int8_bench.m
//          measured at 1.88x fp16 on M4 (digest §4.5, §2.6 item 5);
//   kQ4    4-bit blocks of 32 input channels, ggml's Q4_0 (fp16 scale, offset 8) through
//          constexpr_blockwise_shift_scale (iOS18): a GGUF Q4_0 matrix with the file's own bits, others quantized
//          to Q4_0 (kern::BlobSet::q4_matrix). Whether a chip's ANE compiler takes it: `anelab probe` (quant);
//   kLut4, kLut6  the model file's k-means palettes (16 / 64 fp16 entries per group of rows, quant/palette.h; `anelab
//          convert --palettize`) through constexpr_lut_to_dense with uint4 / uint6 indices (iOS18,
//          kern::BlobSet::lut_matrix); a model without them is refused.
enum class WeightPath : uint8_t { kFp16, kW8, kW8A8, kQ4, kLut4, kLut6 };
const char* weight_path_name(WeightPath w);  // "fp16" | "int8" | "w8a8" | "q4" | "lut4" | "lut6"

struct DeviceProfile {
  std::string name;                  // "m1" ... "m5"
  std::string description;           // human-readable chip family
  mil::Dialect dialect;              // program(1.3)/ios18 on M4/M5, program(1.0)/ios16 on M1-M3
  bool supports_cast = true;         // `cast` unsupported on M1/M2 (digest §2.6.2): use fp16 I/O
  bool accepts_ios18 = true;         // may the program use the ios18 dialect at all
  int64_t min_spatial_fp16 = 32;     // last-dim extent of fp16 I/O tensors (else silent zeros)
  int64_t min_spatial_fp32 = 16;     // same for fp32 I/O
  size_t min_surface_bytes = 49152;  // smallest working IOSurface allocation
  // IOSurface layout of an I/O tensor (surface_layout below). The rows (last dimension) of a tensor
  // start every row_align_bytes bytes on the device. 128: maderix/ANE PR #35 reports 128-byte rows on
  // M5, and every reference uses widths that are multiples of 64 fp16 columns (128 bytes); M1-M4 may
  // take 64 (test_decode_attn.m's stride max(W, 32)). `anelab probe` measures it (row_stride); lower it
  // in a profile only where the probe reports less. The generators pad every I/O row to it
  // (dense_width_multiple).
  size_t row_align_bytes = 128;
  int64_t channel_align = 64;         // allocations count channels rounded up to this (test_lm_head_ane.m)
  size_t surface_page_bytes = 16384;  // allocations are rounded up to whole pages (test_multi_input.m)
  // Largest accepted dimension of any tensor in the program, inclusive. The cap is reported as 65536
  // and treated as exclusive until `anelab probe` (max_dim) shows that 65536 itself works.
  int64_t max_dim = 65535;
  int64_t max_conv_cin = 16384;      // conv input channels: 32000 rejected, 14336 works (digest §4.3) [inference]
  bool sdpa_mask_ignored = true;     // scaled_dot_product_attention ignores attn_mask: reject it
  bool multi_io_slot_order = false;  // M1 report: input sizes strictly ascending, outputs strictly descending
  int compile_budget = 100;          // compiles planned per process: a margin below the ~119 where the
                                     // compiler starts failing (§1.11); maderix's MAX_COMPILES 100
  double peak_fp16_tflops = 0;       // for reports only
  // The weight path "auto" picks (--ane-weights): W8A8 on M4/M5, where MDX measured it (digest §4.5);
  // W8 elsewhere, where int8 weights only halve the baked bytes. Neither is confirmed off M4 (M0 reports
  // every int8 form failing with its call-argument syntax, digest §2.6 item 5): `anelab probe` tries both.
  WeightPath auto_weights = WeightPath::kW8;
  // "auto" per matrix class, as Anemll ships its models (4-bit FFN, 6-bit head, attention in 8 bits): with this set
  // (the ios18 profiles), the FFN matrices (w1, w2, w3) take 4 bits where the model file has them as the same numbers
  // the CPU reads: lut4 when the file stores 4-bit palettes for them, q4 when they are Q4_0; otherwise, and for the
  // attention matrices, auto_weights. The head stays on the CPU in the prefill (infer/prefill_mil.h).
  bool auto_ffn_4bit = false;
};

// Known profiles: m1, m2, m3, m4, m5, and "auto": the ane backend picks the profile of the chip it
// runs on (aneSubType, profile_for_ane_sub_type); everywhere else "auto" is kFallbackDevice.
// Throws listing the names for an unknown one.
const DeviceProfile& device_profile(const std::string& name);
std::vector<std::string> device_profile_names();
inline const char* kDefaultDevice = "auto";
inline const char* kFallbackDevice = "m4";
// --ane-weights: "fp16" | "int8" | "w8a8" | "q4", or "auto" (profile.auto_weights); throws
// "[device] unknown weight path 'X' (choices: fp16, int8, w8a8, q4, auto)" for others, for w8a8 on an
// ios16 profile (quantize / dequantize are iOS17 ops: check_program refuses them in ios16 programs) and for q4 on one
// (constexpr_blockwise_shift_scale is an iOS18 op).
WeightPath parse_weight_path(const std::string& name, const DeviceProfile& profile);
inline constexpr const char* kWeightPathChoices = "fp16, int8, w8a8, q4, lut4, lut6, auto";

// The largest dimension every profile accepts (kernel generators split tensors to stay within it).
int64_t max_dim_all_profiles();
// The last-dimension multiple that gives dense rows (surface_layout(...).dense()) on every profile,
// derived from their row_align_bytes: 64 for fp16, 32 for fp32 with 128-byte rows. Generators pad I/O
// widths and buckets to it.
int64_t dense_width_multiple(mil::DType dtype);

// Static checks of a whole program against a profile (all functions). Returns kLimitExceeded or
// kInvalidArgument with a message naming function, value/op and the rule (including the opset: no
// quantize / dequantize in an ios16 program).
Status check_program(const mil::Program& program, const DeviceProfile& profile);

// Evaluate-time checks of the surfaces bound to one function: count and types match the signature,
// allocation >= min_surface_bytes, multi-input surfaces all >= the largest I/O tensor (digest §4.3),
// and the slot-order rule where the profile has it.
Status check_surfaces(const mil::Function& fn, std::span<Surface* const> inputs, std::span<Surface* const> outputs,
                      const DeviceProfile& profile);

// Where the device expects the elements of an I/O tensor in its IOSurface: rows = every dimension but
// the last, each row of `width` elements starting at a multiple of row_stride bytes. The host tensor
// (rt::Surface) is dense; pack_rows / unpack_rows (surface.h) stage between the two.
struct SurfaceLayout {
  int64_t rows = 0;        // product of all dimensions but the last
  int64_t width = 0;       // last dimension, elements
  size_t elem_bytes = 0;   // 2 (fp16) or 4 (fp32)
  size_t row_bytes = 0;    // width * elem_bytes
  size_t row_stride = 0;   // bytes between row starts on the device: row_bytes rounded up to row_align_bytes
  size_t extent = 0;       // bytes the device touches: (rows - 1) * row_stride + row_bytes
  size_t alloc_bytes = 0;  // allocation: max(min_surface_bytes, rows with channels rounded up to
                           // channel_align × row_stride), rounded up to surface_page_bytes
  bool dense() const { return row_stride == row_bytes; }
};
SurfaceLayout surface_layout(const mil::TensorType& t, const DeviceProfile& profile);

// surface_layout(t, profile).alloc_bytes (digest §1.5, §4.3).
size_t surface_alloc_bytes(const mil::TensorType& t, const DeviceProfile& profile);

// Device profile for a chip family string from +[_ANEDeviceInfo aneSubType]: h13 → m1, h14 → m2,
// h15 → m3, h16 → m4, h17 → m5, compared without case and with any suffix ("h16", "H16G"); "" when
// the family is unknown.
std::string profile_for_ane_sub_type(const std::string& sub_type);

}  // namespace anelab::rt
