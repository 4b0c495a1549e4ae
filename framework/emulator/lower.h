// Lowering of one MIL function to the emulator's FunctionPlan (internal to framework/emulator).
//
// The Lowerer walks the ops in SSA order. For each op it asks the registry (mil::resolve_op) for the
// inferred type and the op's typed parameters, checks the declared type against it, and hands both to
// the op's lowering rule. The rules live with their step functions, one file per op family:
//   elementwise.cpp  binary / unary ops, cast
//   reduce.cpp       softmax, reduce_*
//   linear.cpp       conv, matmul, scaled_dot_product_attention (on the GEMM of gemm.cpp)
//   shape.cpp        reshape, identity, transpose, slice_by_size, slice_by_index, concat (views)
//   quant.cpp        quantize, dequantize, constexpr_affine_dequantize, constexpr_blockwise_shift_scale,
//                    constexpr_lut_to_dense
// and lower.cpp holds const decoding, views, steps, the arena and the table of families. Registered
// ops the emulator does not run are listed, with the reason, by unlowered_ops() (emulator.h).
#pragma once
#include <map>
#include <span>
#include <string>
#include <vector>

#include "framework/emulator/plan.h"
#include "framework/mil/ir.h"
#include "framework/mil/ops.h"
#include "framework/runtime/backend.h"

namespace anelab::emu {

// Builds steps, decodes consts (BLOBFILE consts from `weights`, keyed by their path string) and
// allocates the arena. Throws anelab::Error("[emulator] ...") naming the function, op and problem.
void lower_function(const mil::Function& fn, const rt::Weights& weights, FunctionPlan& plan);

// Largest per-thread GEMM workspace (floats) over all steps of a plan.
void gemm_workspace_needs(const FunctionPlan& plan, size_t* ws_a, size_t* ws_b);

class Lowerer;
// One op's lowering: `r` is the registry's resolution of `op` (its type equals op.type).
using LowerFn = void (*)(Lowerer& l, const mil::Operation& op, const mil::Resolved& r);
struct LowerRule {
  const char* op;
  LowerFn lower;
};
// The rules of each family (defined in the family's file).
std::span<const LowerRule> elementwise_rules();
std::span<const LowerRule> reduce_rules();
std::span<const LowerRule> linear_rules();
std::span<const LowerRule> shape_rules();
std::span<const LowerRule> quant_rules();

class Lowerer {
 public:
  Lowerer(const mil::Function& fn, const rt::Weights& w, FunctionPlan& plan)
      : fn_(fn), weights_(w), plan_(plan), table_(&fn) {}
  void run();

  // ---- what the family rules use ----
  std::string where(const mil::Operation& op) const;  // "function 'f', op 'n' (conv)"
  // The literal of a const-produced argument, decoded to fp32 (fp16 values rounded).
  std::vector<float> lit_floats(const mil::Operation& op, const std::string& key) const;
  std::vector<float> decode_const(const mil::ConstValue& v, const mil::Operation& op) const;
  // value / value_named: contiguous (a view is materialised, once); view / view_named: as stored.
  const ValueInfo& value(const mil::Operation& op, const std::string& key);
  const ValueInfo& value_named(const mil::Operation& op, const std::string& name);
  const ValueInfo& view(const mil::Operation& op, const std::string& key) const;
  const ValueInfo& view_named(const mil::Operation& op, const std::string& name) const;
  // The op's output is a view of x's buffer: element strides (empty: contiguous) at offset `off`.
  void set_view(const mil::Operation& op, const ValueInfo& x, std::vector<int64_t> strides, int64_t off);
  // The op's output is a compile-time const (folded).
  void set_const(const mil::Operation& op, std::vector<float> data);
  // Appends a step writing the op's output; `args` are the step function's arguments.
  Step& new_step(const mil::Operation& op, StepFn fn, std::vector<const ValueInfo*> ins, StepArgs args = {});
  void set_scratch(Step& s, size_t n);
  const FunctionPlan& plan() const { return plan_; }

 private:
  const mil::ConstValue& lit(const mil::Operation& op, const std::string& key) const;
  const ValueInfo& materialize(const std::string& name, const std::string& why);
  std::vector<float> read_blob(const mil::ConstValue& v, const std::string& what) const;
  void lower_op(const mil::Operation& op);
  void lower_const(const mil::Operation& op);
  Ref add_const(std::vector<float> data);
  Ref new_vbuf(size_t n);
  void assign_arena();
  void resolve();

  const mil::Function& fn_;
  const rt::Weights& weights_;
  FunctionPlan& plan_;
  mil::ValueTable table_;  // types and const literals of the values defined so far (for the registry)
  std::map<std::string, ValueInfo> values_;
  std::vector<size_t> vbuf_size_;  // floats per virtual buffer (Ref::kArena index)
};

// Shared by the family rules.
std::vector<int64_t> contiguous_strides(const mil::Shape& s);
std::vector<int64_t> strides_of(const ValueInfo& v);    // view strides, or the contiguous ones
int64_t prod(const mil::Shape& s, size_t b, size_t e);  // product of s[b, e)
// Strides `st` of shape `s` right-aligned into the rank of `out`, 0 on broadcast dims.
std::vector<int64_t> bcast_strides(const mil::Shape& s, const std::vector<int64_t>& st, const mil::Shape& out);

}  // namespace anelab::emu
