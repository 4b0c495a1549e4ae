// The Lowerer: state shared by const decoding (lower.cpp) and per-op lowering (lower_ops.cpp).
// To add an op: write its kernel (kernels.cpp / linear.cpp, declared in plan.h), a lower_<op> here
// and in lower_ops.cpp, and one line in Lowerer::lower_op's table.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "framework/emulator/plan.h"
#include "framework/mil/ir.h"
#include "framework/runtime/backend.h"

namespace anelab::emu {

class Lowerer {
 public:
  Lowerer(const mil::Function& fn, const rt::Weights& w, FunctionPlan& plan) : fn_(fn), weights_(w), plan_(plan) {}
  void run();

 private:
  // literals and values
  std::string where(const mil::Operation& op) const;
  const mil::ConstValue& lit(const mil::Operation& op, const std::string& key) const;
  int64_t lit_int(const mil::Operation& op, const std::string& key, int64_t def) const;
  std::vector<int64_t> lit_ints(const mil::Operation& op, const std::string& key, std::vector<int64_t> def) const;
  bool lit_bool(const mil::Operation& op, const std::string& key, bool def) const;
  std::string lit_str(const mil::Operation& op, const std::string& key, const std::string& def) const;
  std::vector<float> lit_floats(const mil::Operation& op, const std::string& key) const;
  // value / value_named: contiguous (a view is materialised, once); view / view_named: as stored.
  const ValueInfo& value(const mil::Operation& op, const std::string& key);
  const ValueInfo& value_named(const mil::Operation& op, const std::string& name);
  const ValueInfo& view(const mil::Operation& op, const std::string& key) const;
  const ValueInfo& view_named(const mil::Operation& op, const std::string& name) const;
  const ValueInfo& materialize(const std::string& name, const std::string& why);
  void set_view(const mil::Operation& op, const ValueInfo& x, std::vector<int64_t> strides, int64_t off);
  std::vector<float> read_blob(const mil::ConstValue& v, const std::string& what) const;
  std::vector<float> decode_const(const mil::ConstValue& v, const mil::Operation& op) const;
  Ref add_const(std::vector<float> data);
  void expect_shape(const mil::Operation& op, const mil::Shape& want) const;
  int64_t norm_axis(const mil::Operation& op, int64_t axis, int64_t rank) const;

  // steps and arena
  Step& new_step(const mil::Operation& op, KernelFn fn, std::vector<const ValueInfo*> ins);
  Ref new_vbuf(size_t n);
  void set_scratch(Step& s, size_t n);
  void assign_arena();
  void resolve();

  // ops
  void lower_op(const mil::Operation& op);
  void lower_const(const mil::Operation& op);
  void lower_affine_dequantize(const mil::Operation& op);
  void lower_conv(const mil::Operation& op);
  void lower_matmul(const mil::Operation& op);
  void lower_sdpa(const mil::Operation& op);
  void lower_binary(const mil::Operation& op, int64_t bop);
  void lower_unary(const mil::Operation& op, int64_t uop);
  void lower_copy(const mil::Operation& op);
  void lower_transpose(const mil::Operation& op);
  void lower_slice_by_size(const mil::Operation& op);
  void lower_slice_by_index(const mil::Operation& op);
  void lower_concat(const mil::Operation& op);
  void lower_softmax(const mil::Operation& op);
  void lower_reduce(const mil::Operation& op, int64_t kind);
  void lower_cast(const mil::Operation& op);
  void lower_quant(const mil::Operation& op, bool quantize);
  void add_strided(const mil::Operation& op, const ValueInfo& x, const mil::Shape& shape,
                   const std::vector<int64_t>& strides, int64_t base);

  const mil::Function& fn_;
  const rt::Weights& weights_;
  FunctionPlan& plan_;
  std::map<std::string, ValueInfo> values_;
  std::vector<size_t> vbuf_size_;  // floats per virtual buffer (Ref::kArena index)
};

}  // namespace anelab::emu
