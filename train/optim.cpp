#include "train/optim.h"

#include <cmath>
#include <numbers>

#include "framework/core/error.h"
#include "train/parallel.h"

namespace anelab::train {

double learning_rate(const ScheduleConfig& s, int64_t step) {
  if (s.warmup_steps > 0 && step < s.warmup_steps) return s.max_lr * double(step + 1) / double(s.warmup_steps);
  if (!s.cosine) return s.max_lr;
  const double min_lr = s.min_lr_frac * s.max_lr;
  const int64_t span = std::max<int64_t>(1, s.total_steps - s.warmup_steps);
  const double progress = std::min(1.0, double(step - s.warmup_steps) / double(span));
  return min_lr + 0.5 * (s.max_lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

AdamW::AdamW(const ParamLayout& layout, AdamWConfig cfg) : AdamW(layout.params(), layout.total(), cfg) {}

AdamW::AdamW(const std::vector<ParamInfo>& params, int64_t total, AdamWConfig cfg)
    : params_(&params), cfg_(cfg), m_(size_t(total), 0.0f), v_(size_t(total), 0.0f) {}

void AdamW::update(float* w, const float* g, double lr) {
  ++t_;
  const float b1 = float(cfg_.beta1), b2 = float(cfg_.beta2), eps = float(cfg_.eps);
  const double bc1 = 1.0 - std::pow(cfg_.beta1, double(t_));
  const double bc2 = 1.0 - std::pow(cfg_.beta2, double(t_));
  const float step_size = float(lr / bc1), bc2_sqrt = float(std::sqrt(bc2));
  for (const auto& p : *params_) {
    const float decay = p.decay ? float(1.0 - lr * cfg_.weight_decay) : 1.0f;
    float* wp = w + p.offset;
    const float* gp = g + p.offset;
    float* mp = m_.data() + p.offset;
    float* vp = v_.data() + p.offset;
    parallel_rows(p.numel, p.numel, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        wp[i] *= decay;
        mp[i] = mp[i] * b1 + gp[i] * (1.0f - b1);
        vp[i] = vp[i] * b2 + gp[i] * gp[i] * (1.0f - b2);
        const float denom = std::sqrt(vp[i]) / bc2_sqrt + eps;
        wp[i] -= step_size * (mp[i] / denom);
      }
    });
  }
}

double global_norm(const float* g, int64_t n, bool* finite) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(size_t(chunks), 0.0);
  parallel_rows(chunks, n, [&](int64_t c0, int64_t c1) {  // fixed chunks and sum order: any thread count
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0;
      const int64_t end = std::min(n, (c + 1) * kChunk);
      for (int64_t i = c * kChunk; i < end; ++i) s += double(g[i]) * g[i];
      part[size_t(c)] = s;
    }
  });
  double total = 0;
  for (double s : part) total += s;
  *finite = std::isfinite(total);
  return std::sqrt(total);
}

void scale_inplace(float* g, int64_t n, float s) {
  parallel_rows(n, n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) g[i] *= s;
  });
}

float clip_factor(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0f;
  const double c = max_norm / (norm + 1e-6);
  return c < 1.0 ? float(c) : 1.0f;
}

LossScaler LossScaler::parse(const std::string& spec) {
  LossScaler s;
  auto num = [&](const std::string& t) {
    try {
      size_t used = 0;
      const double v = std::stod(t, &used);
      if (used != t.size() || !(v > 0) || !std::isfinite(v)) throw std::invalid_argument(t);
      return v;
    } catch (const std::exception&) {
      fail("train", "--loss-scale '", spec, "': '", t,
           "' is not a positive number (use static:N or dynamic[:INIT[:INTERVAL]])");
    }
  };
  if (spec == "none") return s;
  if (spec.rfind("static:", 0) == 0) {
    s.scale = num(spec.substr(7));
    return s;
  }
  if (spec == "dynamic" || spec.rfind("dynamic:", 0) == 0) {
    s.dynamic = true;
    s.scale = 65536.0;
    if (spec.size() > 8) {
      const std::string rest = spec.substr(8);
      const size_t colon = rest.find(':');
      s.scale = num(rest.substr(0, colon));
      if (colon != std::string::npos) s.interval = int64_t(num(rest.substr(colon + 1)));
    }
    return s;
  }
  fail("train", "--loss-scale '", spec, "' is not one of static:N, dynamic, dynamic:INIT, dynamic:INIT:INTERVAL, none");
}

bool LossScaler::after_backward(bool finite) {
  if (!finite) {
    if (dynamic) scale = std::max(1.0, scale / 2);
    good_steps = 0;
    return true;
  }
  if (dynamic && ++good_steps >= interval) {
    scale *= 2;
    good_steps = 0;
  }
  return false;
}

}  // namespace anelab::train
