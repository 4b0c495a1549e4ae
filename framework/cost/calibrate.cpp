// `anelab estimate --calibrate`: refits the chip parameters an `anelab probe` report (schema anelab.probe/2,
// cli/probe_cmd.cpp) measures. What a probe does not time stays as it was, listed with the reason.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>

#include "framework/core/error.h"
#include "framework/cost/cost.h"

namespace anelab::cost {

namespace {

using nlohmann::json;

// The `ane` timings of case `name` (cases[].name), or nullptr when the case or its ANE half is absent.
const json* ane_case(const json& r, const std::string& name) {
  if (!r.contains("cases") || !r["cases"].is_array()) return nullptr;
  for (const auto& c : r["cases"])
    if (c.is_object() && c.value("name", "") == name && c.contains("ane") && c["ane"].is_object() &&
        c["ane"].contains("eval_ms") && c["ane"]["eval_ms"].is_number())
      return &c;
  return nullptr;
}

double positive(const json& j, const char* key, const std::string& where, const std::string& src) {
  ANELAB_CHECK(j.contains(key) && j[key].is_number() && j[key].get<double>() > 0, "cost", src, ": ", where, ".", key,
               " is not a positive number");
  return j[key].get<double>();
}

}  // namespace

Calibration calibrate(const std::string& text, const std::string& src, const std::string& device) {
  json r;
  try {
    r = json::parse(text);
  } catch (const json::exception& e) {
    fail("cost", src, ": not JSON (", e.what(), ")");
  }
  ANELAB_CHECK(r.is_object() && r.value("schema", "") == "anelab.probe/2", "cost", src,
               ": not an anelab probe report (schema '", r.is_object() ? r.value("schema", "") : "", "', expected ",
               "anelab.probe/2; make one with `anelab probe --out FILE`)");
  std::string dev = device;
  if (dev.empty()) {
    ANELAB_CHECK(r.contains("device_profile") && r["device_profile"].is_string(), "cost", src,
                 ": no device_profile: pass --device");
    dev = r["device_profile"].get<std::string>();
  }
  Calibration cal;
  cal.before = cal.after = chip(dev);
  if (r.contains("numbers") && r["numbers"].is_string()) cal.numbers = r["numbers"].get<std::string>();
  Chip& c = cal.after;
  c.description += ", calibrated on " + src;
  auto set = [&](const char* param, const char* section, double& field, double v) {
    cal.changed.push_back({param, section, field, v});
    field = v;
  };
  auto skip = [&](const char* param, std::string why) { cal.not_fitted.emplace_back(param, std::move(why)); };

  // dispatch: the report's per-evaluation overhead of a trivial program.
  if (r.contains("dispatch_overhead_ms") && r["dispatch_overhead_ms"].is_object() &&
      r["dispatch_overhead_ms"].contains("ane") && r["dispatch_overhead_ms"]["ane"].is_number())
    set("dispatch_us", "dispatch_overhead_ms.ane", c.dispatch_us,
        positive(r["dispatch_overhead_ms"], "ane", "dispatch_overhead_ms", src) * 1e3);
  else
    skip("dispatch_us", "no dispatch_overhead_ms.ane in the report");

  // peak: the 1x1 conv case at its spatial extent, less the dispatch.
  if (const json* conv = ane_case(r, "conv")) {
    std::smatch m;
    const std::string shape = conv->value("shape", "");
    ANELAB_CHECK(std::regex_search(shape, m, std::regex("S=([0-9]+)")), "cost", src, ": cases[conv].shape '", shape,
                 "' names no S=");
    const double S = std::stod(m[1]);
    const double gflop = positive(*conv, "gflop", "cases[conv]", src);
    const double ms = positive((*conv)["ane"], "eval_ms", "cases[conv].ane", src);
    const double busy = std::max(ms - c.dispatch_us * 1e-3, ms * 0.5);
    set("peak_fp16_tflops", "cases[conv]", c.peak_fp16_tflops, gflop / busy / (S / (S + c.s_half)));
    if (const json* q = ane_case(r, "conv_w8a8")) {
      const double ms8 = positive((*q)["ane"], "eval_ms", "cases[conv_w8a8].ane", src);
      const double busy8 = std::max(ms8 - c.dispatch_us * 1e-3, ms8 * 0.5);
      set("int8_speedup", "cases[conv_w8a8]", c.int8_speedup, busy / busy8);
    } else {
      skip("int8_speedup", "no cases[conv_w8a8].ane (W8A8 failed or was not run)");
    }
    if ((*conv)["ane"].contains("compile_ms"))
      set("compile_ms", "cases[conv].ane", c.compile_ms,
          positive((*conv)["ane"], "compile_ms", "cases[conv].ane", src) + (*conv)["ane"].value("load_ms", 0.0));
  } else {
    skip("peak_fp16_tflops", "no cases[conv].ane timings (no ANE in the report)");
    skip("int8_speedup", "no cases[conv].ane timings");
    skip("compile_ms", "no cases[conv].ane timings");
  }

  // SRAM: the knee of the conv-chain sweep; DRAM: the slope of eval time over weight bytes past the knee.
  if (r.contains("sram") && r["sram"].is_object() && r["sram"].contains("knee") && r["sram"]["knee"].is_object()) {
    const json& k = r["sram"]["knee"];
    const double fast = positive(k, "last_fast_bytes", "sram.knee", src);
    const double slow = positive(k, "first_slow_bytes", "sram.knee", src);
    set("sram_mb", "sram.knee", c.sram_mb, (fast + slow) / 2 / 1048576.0);
    std::vector<std::pair<double, double>> past;  // (weight bytes, eval ms) at or past the knee
    if (r["sram"].contains("sizes") && r["sram"]["sizes"].is_array())
      for (const auto& s : r["sram"]["sizes"])
        if (s.is_object() && s.value("working_set_bytes", 0.0) >= slow)
          past.emplace_back(s.value("weight_bytes", 0.0), s.value("eval_ms", 0.0));
    if (past.size() >= 2 && past.back().second > past.front().second && past.back().first > past.front().first)
      set("dram_gbps", "sram.sizes", c.dram_gbps,
          (past.back().first - past.front().first) / (past.back().second - past.front().second) * 1e3 / 1e9);
    else
      skip("dram_gbps", "fewer than two sram.sizes past the knee with growing time");
  } else {
    skip("sram_mb", "no sram.knee in the report (the SRAM sweep did not run)");
    skip("dram_gbps", "no sram section");
  }
  skip("s_half", "the probe times one spatial extent (S=256): the efficiency curve needs two");
  skip("host_gflops", "the probe times no host GEMM (dW, classifier): fit it from a `train` run's timings");
  skip("host_gemm_units", "the chip's CPU clusters, not a timing: kept from the built-in chip");
  skip("host_gbps", "the probe times no host memory stream (Adam's)");
  skip("staging_gbps", "the probe times no IOSurface staging");
  return cal;
}

}  // namespace anelab::cost
