// Typed op parameters: what an op's resolver (ops_decl.cpp) works out from its arguments, defaults
// and argument types, once, for every consumer. The builder/checker/parser take the output type from the
// same resolver; backends lower from these structs instead of re-reading literals, so axes, padding,
// slice bounds and broadcast shapes have one meaning. Every field is normalised: axes are in
// [0, rank), defaults are filled in, "same" padding is resolved to explicit pads.
#pragma once
#include <cstdint>
#include <optional>
#include <variant>
#include <vector>

#include "framework/mil/types.h"

namespace anelab::mil {

// const, identity, reshape (the output type holds the resolved shape), unary elementwise ops.
struct NoParams {};

// Binary elementwise ops: numpy broadcast of x and y.
struct BroadcastParams {
  Shape out;
};

// conv on x [N, C, H, W] with weight [Cout, C/groups, kH, kW].
struct ConvGeometry {
  int64_t stride[2] = {1, 1}, dilation[2] = {1, 1};
  int64_t pad[4] = {0, 0, 0, 0};  // top, bottom, left, right (resolved for "same" / "same_lower" / "valid")
  int64_t groups = 1;
  int64_t out_h = 0, out_w = 0;
};

// matmul: x [..., M, K] (after transpose_x) times y [..., K, N] (after transpose_y); batch dims broadcast.
struct MatmulParams {
  bool transpose_x = false, transpose_y = false;
  int64_t m = 0, k = 0, n = 0;
  Shape batch;  // broadcast batch dims of the output
};

// softmax: the normalised axis.
struct AxisParams {
  int axis = 0;
};

// reduce_*: reduced axes, sorted, unique, normalised (all dims when `axes` is absent).
struct ReduceParams {
  std::vector<int> axes;
  bool keep_dims = false;
};

// transpose: out dim d = in dim perm[d] (normalised).
struct PermParams {
  std::vector<int> perm;
};

// slice_by_size / slice_by_index: per dimension start, step and output length (numpy semantics).
struct SliceGeometry {
  std::vector<int64_t> begin, stride, length;
  std::vector<bool> squeeze;  // slice_by_index squeeze_mask
};

// concat: normalised axis.
struct ConcatParams {
  int axis = 0;
  bool interleave = false;
};

// cast: the target dtype.
struct CastParams {
  DType to = DType::kFp16;
};

// quantize / dequantize: normalised axis of per-channel scale / zero_point (nullopt: per tensor).
struct QuantizeParams {
  std::optional<int> axis;
};

// constexpr_affine_dequantize: normalised axis of scale / zero_point.
struct AffineDequantParams {
  int axis = 0;
};

// constexpr_blockwise_shift_scale / constexpr_lut_to_dense (ios18): the block size along each axis of the
// output (output dim / the per-block parameter's dim on that axis).
struct BlockwiseParams {
  Shape block;
};

// scaled_dot_product_attention: query [batch..., L, E], key [batch..., S, E], value [batch..., S, Ev].
struct SdpaParams {
  Shape batch;
  int64_t l = 0, s = 0, e = 0, ev = 0;
  bool has_mask = false;
};

// layer_norm: normalised axes (all dims when absent) and epsilon (default 1e-5).
struct LayerNormParams {
  std::vector<int> axes;
  double epsilon = 1e-5;
};

using OpParams = std::variant<NoParams, BroadcastParams, ConvGeometry, MatmulParams, AxisParams, ReduceParams,
                              PermParams, SliceGeometry, ConcatParams, CastParams, QuantizeParams, AffineDequantParams,
                              BlockwiseParams, SdpaParams, LayerNormParams>;

}  // namespace anelab::mil
