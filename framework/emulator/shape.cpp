// Shape ops: reshape, identity, transpose, slice_by_size, slice_by_index and concat. All but concat
// produce no step when they can: the result is a view (offset + element strides) of the input's buffer
// (see README "Views"); k_strided makes a contiguous copy of a view for consumers that need one.
#include <algorithm>
#include <cstring>

#include "framework/core/error.h"
#include "framework/emulator/lower.h"

namespace anelab::emu {

using mil::Shape;

// ---- step functions --------------------------------------------------------------------------------------
namespace {

// reshape / identity with a dtype change (fp16 -> fp32 reads): copy and round to the declared dtype.
void k_copy(const Step& s, const ExecCtx& ctx) {
  std::memcpy(s.out, s.in[0], static_cast<size_t>(s.out_n) * sizeof(float));
  round_to_dtype(s.out, s.out_n, s.out_dtype, ctx);
}

void k_concat(const Step& s, const ExecCtx& ctx) {
  const ConcatArgs& a = step_args<ConcatArgs>(s);
  const int64_t n = static_cast<int64_t>(a.chunk.size()), outer = a.outer;
  const int64_t* chunk = a.chunk.data();
  int64_t row = 0;
  for (int64_t i = 0; i < n; ++i) row += chunk[i];
  par_for(ctx, outer, s.out_n > kParMin, [&](int64_t o) {
    float* dst = s.out + o * row;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = chunk[i];
      std::memcpy(dst, s.in[static_cast<size_t>(i)] + o * c, static_cast<size_t>(c) * sizeof(float));
      dst += c;
    }
  });
}

}  // namespace

// Output contiguous in `shape` order.
void k_strided(const Step& s, const ExecCtx& ctx) {
  const StridedArgs& a = step_args<StridedArgs>(s);
  const int64_t rank = static_cast<int64_t>(a.shape.size());
  const int64_t* shape = a.shape.data();
  const int64_t* st = a.strides.data();
  const int64_t base = a.base;
  const int64_t inner = shape[rank - 1], ist = st[rank - 1];
  const int64_t rows = s.out_n / std::max<int64_t>(1, inner);
  const float* in = s.in[0] + base;
  par_for(ctx, rows, s.out_n > kParMin, [&](int64_t r) {
    int64_t off = 0, rem = r;
    for (int64_t d = rank - 2; d >= 0; --d) {
      off += (rem % shape[d]) * st[d];
      rem /= shape[d];
    }
    float* o = s.out + r * inner;
    const float* ip = in + off;
    if (ist == 1)
      std::memcpy(o, ip, static_cast<size_t>(inner) * sizeof(float));
    else
      for (int64_t i = 0; i < inner; ++i) o[i] = ip[i * ist];
  });
}

// ---- lowering -------------------------------------------------------------------------------------
namespace {

// Strides that let `to` (same element count) read a view of shape `from` with strides `st` without a
// copy, when the reshape only splits/merges dims that are contiguous in the view. false: needs a copy.
bool reshape_view(const Shape& from, const std::vector<int64_t>& st, const Shape& to, std::vector<int64_t>* out) {
  Shape os;
  std::vector<int64_t> ost;
  for (size_t d = 0; d < from.size(); ++d)
    if (from[d] != 1) os.push_back(from[d]), ost.push_back(st[d]);
  out->assign(to.size(), 1);
  size_t oi = 0, ni = 0;
  while (oi < os.size() && ni < to.size()) {
    if (to[ni] == 1) {
      ++ni;
      continue;
    }
    int64_t np = to[ni], op = os[oi];
    size_t nj = ni + 1, oj = oi + 1;
    while (np != op) {
      if (np < op) {
        if (nj >= to.size()) return false;
        np *= to[nj++];
      } else {
        if (oj >= os.size()) return false;
        op *= os[oj++];
      }
    }
    for (size_t k = oi; k + 1 < oj; ++k)
      if (ost[k] != os[k + 1] * ost[k + 1]) return false;
    (*out)[nj - 1] = ost[oj - 1];
    for (size_t k = nj - 1; k > ni; --k) (*out)[k - 1] = (*out)[k] * to[k];
    ni = nj, oi = oj;
  }
  return oi == os.size();
}

// reshape / identity: an alias of the input (or a view of a view) when the dtype is unchanged.
void lower_copy(Lowerer& l, const mil::Operation& op, const mil::Resolved&) {
  const ValueInfo& xv = l.view(op, "x");
  if (xv.type.dtype == op.type.dtype) {
    std::vector<int64_t> st;
    if (xv.strides.empty()) return l.set_view(op, xv, {}, 0);
    if (reshape_view(xv.type.shape, xv.strides, op.type.shape, &st)) return l.set_view(op, xv, st, 0);
  }
  const ValueInfo& x = l.value(op, "x");
  if (x.type.dtype == op.type.dtype) return l.set_view(op, x, {}, 0);
  l.new_step(op, k_copy, {&x});
}

void lower_transpose(Lowerer& l, const mil::Operation& op, const mil::Resolved& r) {
  const auto& p = std::get<mil::PermParams>(r.params);
  const ValueInfo& x = l.view(op, "x");
  const auto ist = strides_of(x);
  std::vector<int64_t> st;
  for (int a : p.perm) st.push_back(ist[static_cast<size_t>(a)]);
  l.set_view(op, x, st, 0);
}

// slice_by_size / slice_by_index: a view starting at `begin`, stepping `stride`, squeezed dims dropped.
void lower_slice(Lowerer& l, const mil::Operation& op, const mil::Resolved& r) {
  const auto& g = std::get<mil::SliceGeometry>(r.params);
  const ValueInfo& x = l.view(op, "x");
  const auto ist = strides_of(x);
  std::vector<int64_t> st;
  int64_t base = 0;
  for (size_t d = 0; d < g.begin.size(); ++d) {
    base += g.begin[d] * ist[d];
    if (!g.squeeze[d]) st.push_back(g.stride[d] * ist[d]);
  }
  l.set_view(op, x, op.type.shape.empty() ? std::vector<int64_t>{} : st, base);
}

void lower_concat(Lowerer& l, const mil::Operation& op, const mil::Resolved& r) {
  const auto& p = std::get<mil::ConcatParams>(r.params);
  ANELAB_CHECK(!p.interleave, "emulator", l.where(op), ": interleave=true is not implemented by the emulator");
  std::vector<const ValueInfo*> ins;
  for (const auto& n : op.arg("values")->names) ins.push_back(&l.value_named(op, n));
  const Shape& out = op.type.shape;
  const size_t axis = static_cast<size_t>(p.axis);
  const int64_t inner = prod(out, axis + 1, out.size());
  ConcatArgs a{prod(out, 0, axis), {}};
  for (const ValueInfo* v : ins) a.chunk.push_back(v->type.shape[axis] * inner);
  l.new_step(op, k_concat, ins, std::move(a));
}

constexpr LowerRule kShapeRules[] = {
    {"reshape", lower_copy},        {"identity", lower_copy},        {"transpose", lower_transpose},
    {"slice_by_size", lower_slice}, {"slice_by_index", lower_slice}, {"concat", lower_concat},
};

}  // namespace

std::span<const LowerRule> shape_rules() { return kShapeRules; }

}  // namespace anelab::emu
