// The whole layer through LayerRunner with the trainer's CPU glue (see train_fixture.h).
#include "tests/kernels/train_fixture.h"

namespace anelab::test {

using kern::KernelKind;

ChainResult run_chain(kern::LayerRunner& r, const LayerData& L) {
  const auto& s = L.shape;
  const int64_t D = s.dim, S = s.seq;
  ChainResult c;
  kern::AttnTaps at;
  kern::FfnTaps ft;
  r.attn_forward(L.x.data(), at);
  F32 x2(L.x.size());
  for (size_t i = 0; i < x2.size(); ++i) x2[i] = L.x[i] + at.o[i];
  r.ffn_forward(x2.data(), ft);
  c.out.resize(x2.size());
  for (size_t i = 0; i < x2.size(); ++i) c.out[i] = x2[i] + ft.y[i];
  kern::FfnGrads fg;
  r.ffn_backward(L.dy.data(), ft, fg);
  F32 dx2, da, dxn, dx1;
  r.rms_backward(KernelKind::kRmsFfnBwd, fg.dx.data(), x2.data(), dx2);
  for (size_t i = 0; i < dx2.size(); ++i) dx2[i] += L.dy[i];
  r.wo_backward(dx2.data(), da);
  kern::SdpaGrads sg;
  r.sdpa_backward(at, da.data(), sg);
  r.qkv_backward(sg, dxn);
  r.rms_backward(KernelKind::kRmsAttBwd, dxn.data(), L.x.data(), dx1);
  c.dx.resize(dx1.size());
  for (size_t i = 0; i < dx1.size(); ++i) c.dx[i] = dx1[i] + dx2[i];
  c.dw2 = cpu_outer(L.dy, D, ft.gate, s.hidden, S);
  c.dw1 = cpu_outer(fg.dh1, s.hidden, ft.xnorm, D, S);
  c.dw3 = cpu_outer(fg.dh3, s.hidden, ft.xnorm, D, S);
  c.dwo = cpu_outer(dx2, D, at.attn, s.q_dim(), S);
  c.dwq = cpu_outer(sg.dq, s.q_dim(), at.xnorm, D, S);
  c.dwk = cpu_outer(sg.dk, s.kv_dim(), at.xnorm, D, S);
  c.dwv = cpu_outer(sg.dv, s.kv_dim(), at.xnorm, D, S);
  c.attn = at.attn;
  c.dx2 = dx2;
  c.dq = sg.dq;
  c.dk = sg.dk;
  c.dv = sg.dv;
  return c;
}

}  // namespace anelab::test
