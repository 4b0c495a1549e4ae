// The emulator's execution plan (internal to framework/emulator).
//
// compile() lowers every MIL function to a FunctionPlan:
//   - every value (function input, const, op output) is an fp32 array holding values that are exactly
//     representable in the value's declared dtype (fp16 values are fp16-rounded, int8 values integral);
//   - consts (inline, BLOBFILE, constexpr_affine_dequantize) are decoded once into `consts`;
//   - op outputs and per-op scratch live in one arena allocated at compile time; slots are reused by
//     liveness (a slot is freed after the last op that reads it);
//   - each op becomes a Step: a step function pointer plus resolved input/output/scratch pointers and
//     the step function's typed arguments (one struct per step function, below). evaluate() walks the steps; nothing
//     is allocated while it runs.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "framework/core/fp16.h"
#include "framework/core/thread_pool.h"
#include "framework/mil/types.h"
#include "framework/simd/simd.h"

namespace anelab::emu {

// 64-byte aligned float storage (owning).
struct AlignedFloats {
  AlignedFloats() = default;
  explicit AlignedFloats(size_t n);
  float* data() const { return p_.get(); }
  size_t size() const { return n_; }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  std::unique_ptr<float, Free> p_;
  size_t n_ = 0;
};

// One batched row-major GEMM: for each batch b, C_b[m, n] = epi(op(A_b)[m, k] * op(B_b)[k, n]).
// op(A) = A^T when ta (A stored [k, m]); op(B) = B^T when tb (B stored [n, k]). The epilogue, applied in
// registers: v = alpha * acc (+ bias[row]), then rounded to fp16 when round_fp16. Every C element
// accumulates in fp32 over k in order, in kc-sized blocks (the partial sum is carried through C), so its
// bits depend only on the shape, never on the (batch x m-tile x n-tile) task split or the thread count.
// Micro-tile of the host's SIMD layer (AVX-512 12 x 32, AVX2 and NEON 6 x 16, scalar 4 x 8).
constexpr int64_t kGemmMR = simd::kGemmMR, kGemmNR = simd::kGemmNR;
struct GemmPlan {
  int64_t m = 0, n = 0, k = 0;
  bool ta = false, tb = false;
  int64_t lda = 0, ldb = 0, ldc = 0;         // leading dimensions as stored
  std::vector<int64_t> a_off, b_off, c_off;  // per-batch element offsets
  int64_t tile_m = 264, tile_n = 512;        // task tile (tile_m a multiple of kGemmMR)
  int64_t kc = 256;                          // k block
  size_t ws_a = 0, ws_b = 0;                 // per-thread workspace floats it needs
  bool round_fp16 = true;                    // round C to fp16 in the epilogue
  float alpha = 1.0f;                        // scale of the fp32 accumulator before bias/rounding
  std::vector<int64_t> bias_off;             // per-batch offset into the bias vector; empty: no bias
  AlignedFloats a_packed;                    // A packed at compile time (A const), else empty
  std::vector<int64_t> a_packed_off;         // per-batch offset into a_packed
};
void plan_gemm(GemmPlan& g);                       // fills tile/blocking/workspace fields from m, n, k
void prepack_gemm_a(GemmPlan& g, const float* a);  // A is a compile-time const: pack it once (after plan_gemm)

struct ExecCtx {
  int threads = 1;                 // workers (pool size, or 1 without a pool)
  ThreadPool* pool = nullptr;      // nullptr: run on the caller only
  std::vector<float*> ws_a, ws_b;  // per-worker GEMM packing workspaces
};

// body(i) for i in [0, n), spread over the pool in contiguous ranges when `worth_it` (enough work).
template <typename F>
inline void par_for(const ExecCtx& ctx, int64_t n, bool worth_it, F&& body) {
  if (!worth_it || ctx.pool == nullptr || ctx.threads <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  ctx.pool->parallel_for(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) body(i);
  });
}

// body(worker, i) for i in [0, n): worker w takes the w-th contiguous block (static schedule).
template <typename F>
inline void par_workers(const ExecCtx& ctx, int64_t n, F&& body) {
  if (ctx.pool == nullptr || ctx.threads <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i) body(0, i);
    return;
  }
  const int64_t W = ctx.threads;
  ctx.pool->run([&](int w) {
    for (int64_t i = n * w / W; i < n * (w + 1) / W; ++i) body(w, i);
  });
}

struct Step;
using StepFn = void (*)(const Step&, const ExecCtx&);

// A reference to a value's storage before the arena exists: arena slot, or const pool entry.
struct Ref {
  enum Kind { kNone, kArena, kConst } kind = kNone;
  int index = -1;
  int64_t off = 0;  // element offset into the buffer (aliases: reshape, views)
};

// ---- step function arguments (worked out at lowering from the registry's typed op parameters) ----------
// shape.cpp: contiguous copy of a strided view: out[i...] = in[base + sum(i_d * strides[d])].
struct StridedArgs {
  std::vector<int64_t> shape, strides;  // [rank] each
  int64_t base = 0;
};
// shape.cpp: concat as `outer` rows of the inputs' chunks laid side by side.
struct ConcatArgs {
  int64_t outer = 1;
  std::vector<int64_t> chunk;  // [n_inputs] elements each input contributes per outer index
};
// elementwise.cpp: binary op on collapsed broadcast strides (0 on broadcast dims).
struct BinaryArgs {
  int op = 0;                          // elementwise.cpp's BinOp
  std::vector<int64_t> shape, sa, sb;  // [rank] each, rank >= 1
};
struct UnaryArgs {
  int op = 0;  // elementwise.cpp's UnOp
};
struct CastArgs {
  float lo = 0, hi = 0;  // saturation range of an integer target (unused for fp targets)
};
// reduce.cpp: x viewed as [outer, len, inner], reduced/normalised over len.
struct SoftmaxArgs {
  int64_t outer = 1, len = 1, inner = 1;
};
struct ReduceArgs {
  int kind = 0;  // reduce.cpp's ReduceKind
  int64_t outer = 1, len = 1, inner = 1;
};
// quant.cpp: x viewed as [outer, len, inner]; len is the quantisation axis (1: per tensor).
struct QuantArgs {
  int64_t outer = 1, len = 1, inner = 1;
  float qmin = 0, qmax = 0;              // quantize only
  std::vector<float> scale, zero_point;  // [len] each
};
// linear.cpp: conv on x [N, Cin, H, W] (pads top/left; bottom/right are implied by Ho/Wo).
struct ConvArgs {
  int64_t n = 0, cin = 0, h = 0, w = 0, kh = 0, kw = 0, sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0, ho = 0, wo = 0;
  bool direct = false;    // 1x1, stride 1, no padding: the GEMM reads x as is
  bool has_bias = false;  // in[2] is the bias
};
struct SdpaArgs {
  int64_t batch = 1, l = 0, s = 0;
};
using StepArgs = std::variant<std::monostate, StridedArgs, ConcatArgs, BinaryArgs, UnaryArgs, CastArgs, SoftmaxArgs,
                              ReduceArgs, QuantArgs, ConvArgs, SdpaArgs>;

struct Step {
  StepFn run = nullptr;
  std::string op, name;  // for error messages
  std::vector<Ref> in_refs;
  Ref out_ref, scratch_ref;
  size_t scratch_n = 0;  // scratch floats
  // Resolved after arena allocation:
  std::vector<const float*> in;
  float* out = nullptr;
  float* scratch = nullptr;
  // Shapes / params:
  std::vector<mil::Shape> in_shapes;
  mil::Shape out_shape;
  mil::DType out_dtype = mil::DType::kFp16;
  int64_t out_n = 0;
  StepArgs args;                // the step function's arguments
  std::vector<GemmPlan> gemms;  // conv / matmul / sdpa
};

// The step function's own argument struct (set by its lowering; a step function runs only on steps it was given).
template <typename T>
inline const T& step_args(const Step& s) {
  return *std::get_if<T>(&s.args);
}

// A value: its type and storage. A view (transpose / slice / reshape of a view) has `strides` (elements,
// one per dim of type.shape) into the buffer at `ref`; consumers that cannot read views get a contiguous
// copy (Lowerer::value materialises it once). Contiguous values have empty `strides`.
struct ValueInfo {
  mil::TensorType type;
  Ref ref;
  std::vector<int64_t> strides;
};

struct FunctionPlan {
  std::string name;
  std::vector<ValueInfo> inputs;   // function parameters, in order
  std::vector<ValueInfo> outputs;  // returned values, in order
  std::vector<Step> steps;
  std::vector<size_t> vbuf_offset;  // Ref::kArena index -> float offset in the arena
  AlignedFloats arena;
  std::vector<std::vector<float>> consts;  // decoded constants (fp32 holding dtype-exact values)
  const float* ptr(const Ref& r) const;
  float* mut_ptr(const Ref& r);
};

// ---- helpers shared by the step functions (step_common.cpp, gemm.cpp, reduce.cpp, shape.cpp)
// --------------------------
void run_gemm(const GemmPlan& g, const float* a, const float* b, float* c, const ExecCtx& ctx,
              const float* bias = nullptr);
void exp_inplace_fp32(float* x, int64_t n);  // vectorised exp, ~1 ulp-level accurate fp32
// To the dtype, in place: fp16 round-to-nearest-even, integer types to the nearest integer, fp32 as is.
inline void round_range(float* x, int64_t n, mil::DType t) {
  if (t == mil::DType::kFp16) {
    round_fp16_inplace(x, static_cast<size_t>(n));
  } else if (t != mil::DType::kFp32) {
    for (int64_t i = 0; i < n; ++i) x[i] = std::nearbyint(x[i]);
  }
}
void round_to_dtype(float* x, int64_t n, mil::DType t, const ExecCtx& ctx);  // round_range over the pool
void softmax_rows(float* x, int64_t rows, int64_t len, const ExecCtx& ctx);  // in place, fp32, then fp16-rounded
void k_strided(const Step&, const ExecCtx&);  // StridedArgs: contiguous copy of a view (shape.cpp)
constexpr int64_t kParMin = 1 << 15;          // elements below which a step function stays single-threaded
}  // namespace anelab::emu
