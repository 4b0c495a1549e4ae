// The compressed-weight ops (issue 39) against scripts/quant_ops_reference.py, a NumPy statement of coremltools'
// op definitions: each form is built with small random data, the emulator's dequantized weight (the op's output,
// passed through identity so a -0 keeps its sign) is compared with the script's fp16 output bit for bit. The
// packed sub-byte payloads go to the script as the blob's bytes, so it unpacks them itself (MILBlob's bit order).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <sstream>

#include "framework/core/file.h"
#include "framework/core/fp16.h"
#include "framework/core/npy.h"
#include "tests/common/test_data.h"
#include "tests/emulator/op_harness.h"

namespace anelab::test {
namespace {

using mil::ConstValue;
using mil::DType;

// One case: the MIL op is built into `p`, the same tensors are written into the case directory.
struct QrefCase {
  std::string json;                                                  // case.json
  std::vector<std::pair<std::string, std::vector<float>>> arrays;    // name -> values (fp32 npy)
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;  // name -> shape
  void add(const std::string& name, std::vector<int64_t> shape, std::vector<float> v) {
    arrays.emplace_back(name, std::move(v));
    shapes.emplace_back(name, std::move(shape));
  }
};

std::vector<float> qref_floats(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

// Random fp16 values in [-1, 1), every ninth one -0 (a palette entry or scale of negative zero: its sign must
// survive; negative scales also give -0 for q == offset).
std::vector<double> qref_fp16s(size_t n, std::mt19937& g) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i % 9 == 4 ? -0.0 : r16(std::uniform_real_distribution<double>(-1, 1)(g));
  return v;
}

// MILBlob's sub-byte packing (SubByteTypes.cpp): element i in bits [nbits i, nbits (i + 1)), bytes low bit first.
std::vector<uint8_t> qref_pack(const std::vector<uint8_t>& v, int nbits) {
  std::vector<uint8_t> out((v.size() * static_cast<size_t>(nbits) + 7) / 8, 0);
  for (size_t i = 0; i < v.size(); ++i)
    for (int b = 0; b < nbits; ++b)
      if ((v[i] >> b) & 1) {
        const size_t bit = i * static_cast<size_t>(nbits) + static_cast<size_t>(b);
        out[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
      }
  return out;
}

constexpr int64_t kQrefC = 8, kQrefS = 64, kQrefBlock = 32, kQrefNB = kQrefS / kQrefBlock, kQrefG = 4;

std::string qref_shape_json() { return "[1, " + std::to_string(kQrefC) + ", 1, " + std::to_string(kQrefS) + "]"; }

// Builds form `form` into p (its output: the dequantized weight) and returns the same tensors for the script.
QrefCase qref_build(ProgramUnderTest& p, const std::string& form, std::mt19937& g) {
  const int64_t C = kQrefC, S = kQrefS, NB = kQrefNB, G = kQrefG, n = C * S;
  auto& b = *p.b;
  QrefCase k;
  const std::vector<double> per = qref_fp16s(static_cast<size_t>(C * NB * 64), g);
  auto first = [&](int64_t m) { return std::vector<double>(per.begin(), per.begin() + m); };
  auto as_f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  mil::Value W;
  if (form == "affine_uint8" || form == "affine_int8") {
    const bool u = form == "affine_uint8";
    std::vector<uint8_t> raw(static_cast<size_t>(n));
    for (auto& v : raw) v = static_cast<uint8_t>(g() % 256);
    std::vector<float> q(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) q[i] = u ? raw[i] : static_cast<int8_t>(raw[i]);
    std::vector<int64_t> zp(static_cast<size_t>(C));
    for (auto& z : zp) z = u ? static_cast<int64_t>(g() % 256) : static_cast<int64_t>(g() % 256) - 128;
    const std::vector<double> sc = first(C);
    const uint64_t off = u ? p.blob.add_uint8(raw) : p.blob.add_raw(raw, mil::BlobDType::kInt8);
    const DType t = u ? DType::kUint8 : DType::kInt8;
    W = b.constexpr_affine_dequantize(ConstValue::blobfile(mil::tensor_type(t, {1, C, 1, S}), kWeightsPath, off),
                                      ConstValue::floats(mil::tensor_type(DType::kFp16, {C}), sc),
                                      ConstValue{mil::tensor_type(t, {C}), {}, zp, {}, {}}, 1);
    k.json = R"({"op": "constexpr_affine_dequantize", "axis": 1, "shape": )" + qref_shape_json() + "}";
    k.add("quantized_data", {1, C, 1, S}, q);
    k.add("scale", {C}, as_f(sc));
    k.add("zero_point", {C}, std::vector<float>(zp.begin(), zp.end()));
  } else if (form == "blockwise_uint4" || form == "blockwise_int8") {
    const bool u4 = form == "blockwise_uint4";
    std::vector<uint8_t> raw(static_cast<size_t>(n));
    for (auto& v : raw) v = static_cast<uint8_t>(g() % (u4 ? 16 : 256));
    const std::vector<double> sc = first(C * NB);
    const mil::TensorType dt = mil::tensor_type(u4 ? DType::kUint4 : DType::kInt8, {1, C, 1, S});
    const uint64_t off =
        u4 ? p.blob.add_raw(qref_pack(raw, 4), mil::BlobDType::kUInt4) : p.blob.add_raw(raw, mil::BlobDType::kInt8);
    const auto scale = ConstValue::floats(mil::tensor_type(DType::kFp16, {1, C, 1, NB}), sc);
    k.add("scale", {1, C, 1, NB}, as_f(sc));
    if (u4) {
      std::vector<int64_t> offs(static_cast<size_t>(C * NB));
      for (auto& o : offs) o = static_cast<int64_t>(g() % 16);
      W = b.constexpr_blockwise_shift_scale(
          ConstValue::blobfile(dt, kWeightsPath, off), scale,
          ConstValue{mil::tensor_type(DType::kUint4, {1, C, 1, NB}), {}, offs, {}, {}});
      k.json = R"({"op": "constexpr_blockwise_shift_scale", "packed": true, "nbits": 4, "shape": )" +
               qref_shape_json() + "}";
      k.add("packed", {static_cast<int64_t>(n / 2)}, qref_floats(qref_pack(raw, 4)));
      k.add("offset", {1, C, 1, NB}, std::vector<float>(offs.begin(), offs.end()));
    } else {
      W = b.constexpr_blockwise_shift_scale(ConstValue::blobfile(dt, kWeightsPath, off), scale);
      std::vector<float> q(raw.size());
      for (size_t i = 0; i < raw.size(); ++i) q[i] = static_cast<int8_t>(raw[i]);
      k.json = R"({"op": "constexpr_blockwise_shift_scale", "shape": )" + qref_shape_json() + "}";
      k.add("data", {1, C, 1, S}, q);
    }
  } else {  // lut4 / lut6, per tensor (one palette) or per grouped channel (one per G output channels)
    const int nbits = form.rfind("lut4", 0) == 0 ? 4 : 6, K = 1 << nbits;
    const int64_t P = form.find("grouped") != std::string::npos ? C / G : 1;
    std::vector<uint8_t> raw(static_cast<size_t>(n));
    for (auto& v : raw) v = static_cast<uint8_t>(g() % static_cast<unsigned>(K));
    const std::vector<double> lut = first(P * K);
    const std::vector<uint8_t> packed = qref_pack(raw, nbits);
    const uint64_t off = p.blob.add_raw(packed, nbits == 4 ? mil::BlobDType::kUInt4 : mil::BlobDType::kUInt6);
    W = b.constexpr_lut_to_dense(
        ConstValue::blobfile(mil::tensor_type(nbits == 4 ? DType::kUint4 : DType::kUint6, {1, C, 1, S}), kWeightsPath,
                             off),
        ConstValue::floats(mil::tensor_type(DType::kFp16, {1, P, 1, 1, K, 1}), lut));
    k.json = R"({"op": "constexpr_lut_to_dense", "packed": true, "nbits": )" + std::to_string(nbits) +
             R"(, "shape": )" + qref_shape_json() + "}";
    k.add("packed", {static_cast<int64_t>(packed.size())}, qref_floats(packed));
    k.add("lut", {1, P, 1, 1, K, 1}, as_f(lut));
  }
  b.output(b.identity(W));
  return k;
}

bool qref_numpy_available(std::string* why) {
  FILE* pipe = ::popen("/usr/bin/python3 -c 'import numpy' 2>&1", "r");
  if (!pipe) return *why = "popen failed", false;
  char buf[512];
  while (size_t m = std::fread(buf, 1, sizeof buf, pipe)) why->append(buf, m);
  return ::pclose(pipe) == 0;
}

class QuantOpsReference : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantOpsReference, EmulatorEqualsNumpyBitForBit) {
  std::string why;
  if (!qref_numpy_available(&why)) GTEST_SKIP() << "/usr/bin/python3 with numpy unavailable: " << why;
  const std::string form = GetParam();
  unsigned seed = 4039u;  // the same data on every standard library (std::hash differs between them)
  for (const char ch : form) seed = seed * 31u + static_cast<unsigned char>(ch);
  std::mt19937 g(seed);
  ProgramUnderTest p;
  const QrefCase k = qref_build(p, form, g);
  const std::string dir = temp_dir("qref_" + form).string();
  write_file_atomic(dir + "/case.json", k.json);
  for (size_t i = 0; i < k.arrays.size(); ++i)
    write_npy(dir + "/" + k.arrays[i].first + ".npy", k.shapes[i].second, k.arrays[i].second.data());
  const std::string cmd = "/usr/bin/python3 " + source_path("scripts/quant_ops_reference.py") + " " + dir + " 2>&1";
  std::string log;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buf[4096];
  while (size_t m = std::fread(buf, 1, sizeof buf, pipe)) log.append(buf, m);
  ASSERT_EQ(::pclose(pipe), 0) << cmd << "\n" << log;
  const NpyArray ref = read_npy(dir + "/out.npy");
  ASSERT_EQ(ref.dtype, "<f2");
  ASSERT_EQ(ref.numel(), kQrefC * kQrefS);

  const BackendRun r = run_on("emulator", p);
  ASSERT_EQ(r.raw.size(), 1u);
  ASSERT_EQ(r.raw[0].size(), static_cast<size_t>(2 * kQrefC * kQrefS));
  size_t differ = 0, first = 0, neg_zero = 0;
  for (size_t i = 0; i < static_cast<size_t>(ref.numel()); ++i) {
    half_bits got;
    std::memcpy(&got, r.raw[0].data() + 2 * i, 2);
    const half_bits want = float_to_half(ref.data[i]);  // exact: the script wrote fp16
    neg_zero += want == 0x8000;
    if (got != want && differ++ == 0) first = i;
  }
  EXPECT_EQ(differ, 0u) << form << ": " << differ << " of " << ref.numel() << " weights differ; first at " << first
                        << ": emulator 0x" << std::hex << (r.raw[0][2 * first] | (r.raw[0][2 * first + 1] << 8))
                        << ", numpy 0x" << float_to_half(ref.data[first]);
  RecordProperty("negative_zeros", static_cast<int>(neg_zero));
}

INSTANTIATE_TEST_SUITE_P(Forms, QuantOpsReference,
                         ::testing::Values("affine_uint8", "affine_int8", "blockwise_uint4", "blockwise_int8",
                                           "lut4_tensor", "lut4_grouped", "lut6_tensor", "lut6_grouped"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace anelab::test
