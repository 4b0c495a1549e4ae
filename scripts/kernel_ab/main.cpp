// scripts/kernel_ab/run.sh: old vs new kernels, alternating, min and median times.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
double old_conv(void*&);
double new_conv(void*&);
double old_gemm(void*&);
double new_gemm(void*&);
double old_gemv(void*&);
double new_gemv(void*&);
int main(int argc, char** argv) {
  int reps = argc > 1 ? std::atoi(argv[1]) : 15;
  void *so = nullptr, *sn = nullptr;
  struct K {
    const char* n;
    double (*o)(void*&);
    double (*w)(void*&);
  } ks[] = {{"conv", old_conv, new_conv}, {"gemm", old_gemm, new_gemm}, {"gemv20", old_gemv, new_gemv}};
  for (auto& k : ks) {
    std::vector<double> o, w;
    for (int i = 0; i < reps; ++i) {
      if (i % 2) {
        w.push_back(k.w(sn));
        o.push_back(k.o(so));
      } else {
        o.push_back(k.o(so));
        w.push_back(k.w(sn));
      }
    }
    std::sort(o.begin(), o.end());
    std::sort(w.begin(), w.end());
    std::printf("%-8s old min %.3f ms med %.3f | new min %.3f med %.3f | new/old time (min) %.3f\n", k.n, o[0] * 1e3,
                o[reps / 2] * 1e3, w[0] * 1e3, w[reps / 2] * 1e3, w[0] / o[0]);
  }
}
