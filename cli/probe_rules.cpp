// The rule probes of `anelab probe` (probe_rules.h): raw experiments through a Shim.
#include "cli/probe_rules.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <tuple>

#include "cli/probe_raw.h"
#include "framework/ane/native_rules.h"
#include "framework/core/fp16.h"
#include "framework/mil/blob.h"
#include "framework/mil/builder.h"
#include "framework/mil/printer.h"

namespace anelab::cli {
namespace {

using mil::DType;
using mil::Value;
using nlohmann::json;

// y = conv(x, I) on C channels (an identity 1x1 conv; weights in weights/i.bin).
Value identity_conv(mil::FunctionBuilder& b, const Value& x, int64_t c, rt::Weights& w) {
  std::vector<float> eye(static_cast<size_t>(c * c), 0.0f);
  for (int64_t i = 0; i < c; ++i) eye[static_cast<size_t>(i * c + i)] = 1.0f;
  mil::BlobWriter bw;
  const uint64_t off = bw.add_fp16(eye);
  w["@model_path/weights/i.bin"] = std::make_shared<const std::vector<uint8_t>>(bw.take());
  return b.conv(x, b.const_blob(mil::tensor_type(DType::kFp16, {c, c, 1, 1}), "@model_path/weights/i.bin", off));
}

constexpr int64_t kRows = 16;  // channels of the layout probes
// Width of every probe tensor that is not itself about widths: 128 fp16 columns = 256-byte rows, dense
// whether the device aligns rows to 64, 128 or 256 bytes, so a row-stride discrepancy cannot spoil them.
constexpr int64_t kW = 128;
constexpr size_t kBig = 49152 * 2;          // surface size large enough for any plausible stride
constexpr int kPeriod = 2048;               // fp16 holds the integers 0..2048 exactly
constexpr int kReportedCompileLimit = 119;  // compiles that succeed per process (digest §1.11)
size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

// ---- row_stride ----------------------------------------------------------------------------------
json row_stride_one(Raw& raw, const rt::DeviceProfile& p, int64_t S) {
  json r;
  const int64_t P = static_cast<int64_t>(round_up(static_cast<size_t>(S), kW));  // a known-dense width
  const ane::RequestIndices one{{0}, {0}, 0};
  {  // input rows: x [R, S] -> identity conv -> padded to P columns (dense): out(c, s) = in_raw[c*stride + s]
    mil::ProgramBuilder pb;
    auto& b = pb.function("main");
    rt::Weights w;
    Value x = b.input("x", mil::tensor_type(DType::kFp16, {1, kRows, 1, S}));
    Value y = identity_conv(b, x, kRows, w);
    if (P > S)
      y = b.concat({y, b.const_tensor(mil::tensor_type(DType::kFp16, {1, kRows, 1, P - S}),
                                      std::vector<double>(static_cast<size_t>(kRows * (P - S)), 0.0))},
                   3);
    b.output(y);
    Built m = print_for(pb, p);
    m.weights = w;
    Result<size_t> h = raw.load(m.text, m.weights);
    r["accepted"] = h.is_ok();
    if (!h) {
      r["error"] = h.status().message();
      return r;
    }
    std::vector<float> in(kBig / 2);
    for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<float>(k % kPeriod);
    auto out = raw.eval(*h, {f16_bytes(in, kBig)}, {kBig}, {kBig}, one);
    raw.unload(*h);
    if (!out) {
      r["error"] = out.status().message();
      return r;
    }
    const auto& o = (*out)[0];
    const int64_t stride =
        (static_cast<int64_t>(f16_at(o, static_cast<size_t>(P))) - static_cast<int64_t>(f16_at(o, 0)) + kPeriod) %
        kPeriod;
    bool consistent = true;
    for (int64_t c = 0; c < kRows; ++c)
      for (int64_t s = 0; s < S; ++s)
        consistent =
            consistent && f16_at(o, static_cast<size_t>(c * P + s)) ==
                              static_cast<float>((c * stride + s + static_cast<int64_t>(f16_at(o, 0))) % kPeriod);
    r["input_stride_bytes"] = stride * 2;
    r["input_consistent"] = consistent;
  }
  {  // output rows: x [R, P] dense -> slice to S -> identity conv: find where row 1 starts in the raw output
    mil::ProgramBuilder pb;
    auto& b = pb.function("main");
    rt::Weights w;
    Value x = b.input("x", mil::tensor_type(DType::kFp16, {1, kRows, 1, P}));
    Value xs = P > S ? b.slice_by_size(x, {0, 0, 0, 0}, {1, kRows, 1, S}) : x;
    b.output(identity_conv(b, xs, kRows, w));
    Built m = print_for(pb, p);
    m.weights = w;
    Result<size_t> h = raw.load(m.text, m.weights);
    if (!h) {
      r["output_error"] = h.status().message();
      return r;
    }
    std::vector<float> in(static_cast<size_t>(kRows * P));
    for (int64_t c = 0; c < kRows; ++c)
      for (int64_t s = 0; s < P; ++s)
        in[static_cast<size_t>(c * P + s)] = static_cast<float>((c * 100 + s + 1) % kPeriod);
    auto out = raw.eval(*h, {f16_bytes(in, kBig)}, {kBig}, {kBig}, one, float_to_half(-1.0f));
    raw.unload(*h);
    if (!out) {
      r["output_error"] = out.status().message();
      return r;
    }
    const auto& o = (*out)[0];
    int64_t stride = -1;
    for (size_t k = 1; k < o.size() / 2 && stride < 0; ++k)
      if (f16_at(o, k) == static_cast<float>(101)) stride = static_cast<int64_t>(k);  // logical (1, 0)
    r["output_stride_bytes"] = stride < 0 ? json(nullptr) : json(stride * 2);
  }
  return r;
}

json row_stride(Raw& raw, const rt::DeviceProfile& p) {
  json r;
  for (int64_t S : {32, 33, 48, 64, 100}) r[std::to_string(S)] = row_stride_one(raw, p, S);
  return r;
}

// ---- min_surface ---------------------------------------------------------------------------------
json min_surface(Raw& raw, const rt::DeviceProfile& p) {
  json r;
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  rt::Weights w;
  constexpr int64_t rows = 2048 / (2 * kW);
  Value x = b.input("x", mil::tensor_type(DType::kFp16, {1, rows, 1, kW}));  // 2048 bytes
  b.output(identity_conv(b, x, rows, w));
  Built m = print_for(pb, p);
  Result<size_t> h = raw.load(m.text, w);
  if (!h) return json{{"error", h.status().message()}};
  std::vector<float> in(rows * kW);
  for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<float>(k % 997 + 1);
  for (size_t bytes : {size_t{2048}, size_t{16384}, size_t{49152}}) {
    auto out = raw.eval(*h, {f16_bytes(in, bytes)}, {bytes}, {bytes}, {{0}, {0}, 0});
    json one;
    if (!out) {
      one = {{"works", false}, {"detail", "error: " + out.status().message()}};
    } else {
      size_t same = 0, zero = 0;
      for (size_t k = 0; k < in.size(); ++k) {
        same += f16_at((*out)[0], k) == in[k];
        zero += f16_at((*out)[0], k) == 0.0f;
      }
      one = {{"works", same == in.size()},
             {"detail", same == in.size()   ? "ok"
                        : zero == in.size() ? "zeros"
                                            : "wrong values"}};
    }
    r[std::to_string(bytes)] = one;
  }
  raw.unload(*h);
  return r;
}

// ---- io_order ------------------------------------------------------------------------------------
json io_order(Raw& raw, const rt::DeviceProfile& p) {
  const int64_t S = kW, c0 = 32, c1 = 64, c2 = 96;  // ascending inputs, descending outputs (the M1 rule)
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  // Names out of alphabetical order (inputs zeta, alpha, mid; outputs zz_cat, aa_scaled), so a device
  // that binds by sorted name and one that binds by position give different results.
  Value a = b.input("zeta", mil::tensor_type(DType::kFp16, {1, c0, 1, S}));
  Value bb = b.input("alpha", mil::tensor_type(DType::kFp16, {1, c1, 1, S}));
  Value c = b.input("mid", mil::tensor_type(DType::kFp16, {1, c2, 1, S}));
  Value ten = b.scalar(DType::kFp16, 10.0);
  b.output(b.named("zz_cat").concat({a, bb, c}, 1));
  b.output(b.named("aa_scaled").mul(a, ten));
  Built m = print_for(pb, p);
  Result<size_t> h = raw.load(m.text);
  if (!h) return json{{"error", h.status().message()}};
  const size_t sz = rt::surface_alloc_bytes(mil::tensor_type(DType::kFp16, {1, c0 + c1 + c2, 1, S}), p);
  auto fill = [&](int64_t ch, float v) { return f16_bytes(std::vector<float>(static_cast<size_t>(ch * S), v), sz); };
  auto out =
      raw.eval(*h, {fill(c0, 1.0f), fill(c1, 2.0f), fill(c2, 3.0f)}, {sz, sz, sz}, {sz, sz}, {{0, 1, 2}, {0, 1}, 0});
  raw.unload(*h);
  if (!out) return json{{"error", out.status().message()}};
  json inputs = json::array();
  for (int64_t off : {int64_t{0}, c0, c0 + c1}) {  // which input's value fills each concat block
    const float v = f16_at((*out)[0], static_cast<size_t>(off * S));
    inputs.push_back(v >= 1.0f && v <= 3.0f && v == std::round(v) ? json(static_cast<int>(v) - 1) : json(nullptr));
  }
  const bool second = f16_at((*out)[1], 0) == 10.0f && f16_at((*out)[1], static_cast<size_t>(c0 * S - 1)) == 10.0f;
  return json{{"inputs", inputs}, {"outputs", second ? json::array({0, 1}) : json(nullptr)}};
}

// ---- procedures ----------------------------------------------------------------------------------
json procedures(Raw& raw, const rt::DeviceProfile& p, ane::Shim& shim) {
  mil::ProgramBuilder pb;  // inputs b_0, a_1: a compiler that sorts its symbol table by name numbers a_1 first
  for (double k : {2.0, 3.0}) {
    auto& f = pb.function(k == 2.0 ? "double_it" : "triple_it");
    f.output(f.mul(f.input(k == 2.0 ? "b" : "a", mil::tensor_type(DType::kFp16, {1, 32, 1, kW})), k));
  }
  Built m = print_for(pb, p);
  Result<size_t> h = raw.load(m.text);
  if (!h) return json{{"error", h.status().message()}};
  json r;
  json inferred = json::array();
  for (int fn = 0; fn < 2; ++fn) {
    const ane::RequestIndices i = ane::request_indices(m.program, fn);
    inferred.push_back({{"procedure", i.procedure}, {"inputs", i.inputs}, {"outputs", i.outputs}});
  }
  r["inferred"] = inferred;
  Result<std::vector<ane::ProcedureSymbols>> table = shim.procedure_symbols(raw.handle(*h));
  if (!table) {
    r["error"] = table.status().message();
  } else {
    json t = json::array();
    for (const auto& e : *table)
      t.push_back({{"procedure", e.procedure_id}, {"inputs", e.inputs}, {"outputs", e.outputs}});
    r["symbols"] = t;
    Result<ane::RequestIndices> idx = ane::procedure_indices(m.program, 1, *table);
    if (idx) {
      const size_t sz = rt::surface_alloc_bytes(mil::tensor_type(DType::kFp16, {1, 32, 1, kW}), p);
      auto out = raw.eval(*h, {f16_bytes(std::vector<float>(32 * kW, 1.5f), sz)}, {sz}, {sz}, *idx);
      r["procedure1_runs"] = out.is_ok() && f16_at((*out)[0], 0) == 4.5f && f16_at((*out)[0], 32 * kW - 1) == 4.5f;
      if (!out) r["procedure1_error"] = out.status().message();
    } else {
      r["procedure1_runs"] = false;
      r["procedure1_error"] = idx.status().message();
    }
  }
  raw.unload(*h);
  return r;
}

// ---- max_dim -------------------------------------------------------------------------------------
json max_dim(Raw& raw, const rt::DeviceProfile& p) {
  json r;
  for (int64_t d : {int64_t{32768}, int64_t{65536}, int64_t{131072}}) {
    mil::ProgramBuilder pb;  // x [1, d/W, 1, W] -> [1, 1, 1, d] -> x2 -> back
    auto& b = pb.function("main");
    Value x = b.input("x", mil::tensor_type(DType::kFp16, {1, d / kW, 1, kW}));
    b.output(b.reshape(b.mul(b.reshape(x, {1, 1, 1, d}), 2.0), {1, d / kW, 1, kW}));
    Built m = print_for(pb, p);
    Result<size_t> h = raw.load(m.text);
    json one{{"accepted", h.is_ok()}};
    if (!h) {
      one["detail"] = h.status().message();
    } else {
      const size_t sz = rt::surface_alloc_bytes(mil::tensor_type(DType::kFp16, {1, d / kW, 1, kW}), p);
      auto out =
          raw.eval(*h, {f16_bytes(std::vector<float>(static_cast<size_t>(d), 0.75f), sz)}, {sz}, {sz}, {{0}, {0}, 0});
      one["runs"] =
          out.is_ok() && f16_at((*out)[0], 0) == 1.5f && f16_at((*out)[0], static_cast<size_t>(d - 1)) == 1.5f;
      if (!out) one["detail"] = out.status().message();
      raw.unload(*h);
    }
    r[std::to_string(d)] = one;
  }
  return r;
}

// ---- float_literals ------------------------------------------------------------------------------
json float_literals(Raw& raw, const rt::DeviceProfile& p) {
  mil::ProgramBuilder pb;
  auto& b = pb.function("main");
  b.output(b.mul(b.input("x", mil::tensor_type(DType::kFp16, {1, 32, 1, kW})), 0.1875));
  const Built m = print_for(pb, p);
  const std::string printed = mil::format_double(0.1875);  // the printer's own form (hex)
  const size_t at = m.text.find("(" + printed + ")");
  json r;
  if (at == std::string::npos) return json{{"error", "printed program has no " + printed + " literal"}};
  // form -> (literal, value it must produce)
  const std::vector<std::tuple<std::string, std::string, float>> forms = {
      {"hex", "0x1.8p-3", 0.1875f},
      {"hex_long", "0x1.4f8b588e368f1p-17", round_fp16(1e-5f)},
      {"hex_negative", "-0x1.8p-3", -0.1875f},
      {"fixed", "0.187500", 0.1875f},
      {"exponent", "1.875e-01", 0.1875f}};
  const size_t sz = rt::surface_alloc_bytes(mil::tensor_type(DType::kFp16, {1, 32, 1, kW}), p);
  for (const auto& [form, lit, want] : forms) {
    std::string text = m.text;
    text.replace(at + 1, printed.size(), lit);
    Result<size_t> h = raw.load(text);
    json one{{"literal", lit}, {"accepted", h.is_ok()}};
    if (!h) {
      one["detail"] = h.status().message();
    } else {
      auto out = raw.eval(*h, {f16_bytes(std::vector<float>(32 * kW, 1.0f), sz)}, {sz}, {sz}, {{0}, {0}, 0});
      one["value_ok"] = out.is_ok() && f16_at((*out)[0], 0) == want;
      raw.unload(*h);
    }
    r[form] = one;
  }
  return r;
}

// ---- compile_limit -------------------------------------------------------------------------------
json compile_limit(Raw& raw, const rt::DeviceProfile& p, int limit, int before) {
  for (int i = 0; i < limit; ++i) {
    mil::ProgramBuilder pb;  // a distinct program each time (no daemon cache hit)
    auto& b = pb.function("main");
    b.output(b.add(b.input("x", mil::tensor_type(DType::kFp16, {1, 32, 1, kW})), static_cast<double>(i + 1)));
    Result<size_t> h = raw.load(print_for(pb, p).text);
    if (!h)
      return json{{"compiles_in_probe", i + 1},
                  {"compiles_until_failure", before + i + 1},
                  {"compiles_before", before},
                  {"detail", h.status().message()}};
    raw.unload(*h);
  }
  return json{{"compiles_in_probe", limit},
              {"compiles_until_failure", nullptr},
              {"compiles_before", before},
              {"detail", cat("no failure within --compile-limit ", limit)}};
}

// ---- comparison ----------------------------------------------------------------------------------
// Leaves present in both `a` (profile) and `b` (measurement) are compared; returns how many matched
// and appends "path: profile X, measured Y" for each mismatch.
void compare(const json& a, const json& b, const std::string& path, int& n, std::vector<std::string>& diffs) {
  if (a.is_object() && b.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it)
      if (b.contains(it.key())) compare(it.value(), b[it.key()], path + "." + it.key(), n, diffs);
    return;
  }
  if (a.is_null() || b.is_null()) return;
  ++n;
  if (a != b) diffs.push_back(cat(path.substr(1), ": profile ", a.dump(), ", measured ", b.dump()));
}

}  // namespace

json run_rule_probes(ane::Shim& shim, const rt::DeviceProfile& profile, const RuleProbeOptions& o) {
  Raw raw(shim, o.qos);
  json r;
  r["row_stride"] = row_stride(raw, profile);
  r["min_surface"] = min_surface(raw, profile);
  r["io_order"] = io_order(raw, profile);
  r["procedures"] = procedures(raw, profile, shim);
  r["max_dim"] = max_dim(raw, profile);
  r["float_literals"] = float_literals(raw, profile);
  r["compiles"] = raw.compiles();
  return r;
}

json run_compile_limit_probe(ane::Shim& shim, const rt::DeviceProfile& profile, int limit, int compiles_before,
                             uint32_t qos) {
  Raw raw(shim, qos);
  return compile_limit(raw, profile, limit, compiles_before);
}

json rule_assumptions(const rt::DeviceProfile& p, const RuleProbeOptions& o) {
  json r;
  for (int64_t S : {32, 33, 48, 64, 100}) {
    const rt::SurfaceLayout l = rt::surface_layout(mil::tensor_type(DType::kFp16, {1, kRows, 1, S}), p);
    r["row_stride"][std::to_string(S)] = {
        {"accepted", l.dense()}, {"input_stride_bytes", l.row_stride}, {"output_stride_bytes", l.row_stride}};
  }
  for (size_t bytes : {size_t{2048}, size_t{16384}, size_t{49152}})
    r["min_surface"][std::to_string(bytes)] = {{"works", bytes >= p.min_surface_bytes}};
  r["io_order"] = {{"inputs", {0, 1, 2}}, {"outputs", {0, 1}}};
  json inferred = json::array();
  int64_t i = 0, k = 0;
  for (int fn = 0; fn < 2; ++fn) inferred.push_back({{"procedure", fn}, {"inputs", {i++}}, {"outputs", {k++}}});
  r["procedures"] = {{"symbols", inferred}, {"procedure1_runs", true}};
  for (int64_t d : {int64_t{32768}, int64_t{65536}, int64_t{131072}})
    r["max_dim"][std::to_string(d)] = {{"accepted", d <= p.max_dim}};
  r["float_literals"] = {{"hex", {{"accepted", true}, {"value_ok", true}}},
                         {"hex_long", {{"accepted", true}, {"value_ok", true}}},
                         {"hex_negative", {{"accepted", true}, {"value_ok", true}}}};
  // the compile that fails: the one after the ~119 that succeed (digest §1.11; the profile's
  // compile_budget stays below it)
  if (o.compile_limit > 0) r["compile_limit"] = {{"compiles_until_failure", kReportedCompileLimit + 1}};
  return r;
}

json compare_rules(const json& profile, const json& emulator, const json& ane) {
  json out = json::array();
  for (auto it = profile.begin(); it != profile.end(); ++it) {
    const std::string& rule = it.key();
    json e{{"name", rule}, {"profile", it.value()}};
    e["emulator"] = emulator.contains(rule) ? emulator[rule] : json(nullptr);
    e["ane"] = ane.is_object() && ane.contains(rule) ? ane[rule] : json(nullptr);
    for (const char* side : {"emulator", "ane"}) {
      int n = 0;
      std::vector<std::string> diffs;
      if (!e[side].is_null()) compare(it.value(), e[side], "", n, diffs);
      const std::string key = std::string(side) + "_agrees";
      e[key] = n == 0 ? json(nullptr) : json(diffs.empty());
      if (!diffs.empty()) e[std::string(side) + "_differences"] = diffs;
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace anelab::cli
