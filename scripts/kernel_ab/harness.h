// Shared by scripts/kernel_ab/run.sh: one Bench per source revision (compiled once per namespace).
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "framework/emulator/plan.h"
#include "infer/cpu_math.h"
namespace anelab::emu {
AlignedFloats::AlignedFloats(size_t n) : n_(n) {
  const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes ? bytes : 64);
  std::memset(p, 0, bytes);
  p_.reset(static_cast<float*>(p));
}
void AlignedFloats::Free::operator()(float* p) const { std::free(p); }
}  // namespace anelab::emu
namespace anelab {
[[noreturn]] void fail_impl(const char*) { std::abort(); }
struct Bench {
  emu::GemmPlan g;
  std::vector<float> a, b, c;
  emu::ExecCtx ctx;
  emu::AlignedFloats ws;
  ThreadPool pool{1};
  std::vector<uint16_t> w16;
  std::vector<float> x, y;
  infer::Mat m;
  Bench() {
    std::mt19937 r(1);
    std::uniform_real_distribution<float> d(-1, 1);
    g.m = 2048;
    g.n = 256;
    g.k = 768;
    g.lda = 768;
    g.ldb = 256;
    g.ldc = 256;
    g.a_off = {0};
    g.b_off = {0};
    g.c_off = {0};
    a.resize(2048 * 768);
    b.resize(768 * 256);
    c.resize(2048 * 256);
    for (auto& v : a) v = round_fp16(d(r));
    for (auto& v : b) v = round_fp16(d(r));
    emu::plan_gemm(g);
    emu::prepack_gemm_a(g, a.data());
    ws = emu::AlignedFloats(g.ws_a + g.ws_b + 16);
    ctx.threads = 1;
    ctx.ws_a = {ws.data()};
    ctx.ws_b = {ws.data() + g.ws_a};
    w16.resize(2304 * 768);
    for (auto& v : w16) v = float_to_half(d(r) * 0.1f);
    x.resize(256 * 768);
    for (auto& v : x) v = d(r);
    y.resize(256 * 2304);
    m.type = infer::WType::kF16;
    m.rows = 2304;
    m.cols = 768;
    m.data = w16.data();
  }
  double conv() {
    auto t = std::chrono::steady_clock::now();
    emu::run_gemm(g, a.data(), b.data(), c.data(), ctx);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }
  double gemm() {
    auto t = std::chrono::steady_clock::now();
    infer::gemm(pool, m, nullptr, x.data(), 256, y.data());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }
  double gemv() {
    auto t = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) infer::gemv(pool, m, nullptr, x.data(), y.data());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }
};
}  // namespace anelab
