// Issue 40 item 4: the silent-zeros self-check (framework/kernels/self_check.h) through the native backend
// over a FakeShim: a device with the profile's layout agrees with the emulator exactly; one that writes its
// outputs a row further down (the planted layout error, no error returned) is told apart by far more than
// the fp16 limit, in one line naming the backend, the device profile, the kernel and the max rel diff.
#include <nlohmann/json.hpp>

#include "framework/core/file.h"
#include "framework/kernels/self_check.h"
#include "framework/kernels/train.h"
#include "tests/ane/ane_test_util.h"

namespace anelab::test {
namespace {

TEST(SelfCheck, AgreesOnTheProfilesLayoutAndFlagsAPlantedLayoutError) {
  kern::TrainShape s;
  s.dim = 64, s.hidden = 192, s.n_heads = 2, s.n_kv_heads = 1, s.head_dim = 32, s.seq = 64;
  const kern::KernelSpec spec = kern::build_kernel(kern::KernelKind::kAttnFwd, s, kern::Strategy::kDynamic);
  for (const bool planted : {false, true}) {
    ane::FakeShimOptions fo;
    fo.layout_error = planted;
    Native n = make_native("m4", -1, fo);
    const kern::SelfCheck c = kern::run_self_check(*n.backend, spec.name, spec.in.type(), spec.out.type());
    EXPECT_EQ(c.backend, "ane");
    EXPECT_EQ(c.device, "m4");
    EXPECT_EQ(c.tolerance, 1.0 / 1024);  // two fp16 roundings, 2u
    EXPECT_EQ(c.ok(), !planted) << c.line();
    if (planted) {
      EXPECT_GE(c.max_rel_diff, 0.5) << c.line();
    } else {
      EXPECT_EQ(c.max_rel_diff, 0.0) << c.line();  // every value is an fp16 number
    }
    const std::string line = c.line();
    EXPECT_EQ(line.find('\n'), std::string::npos);
    for (const std::string part : {"[self-check] ane m4 attn_fwd", "max rel diff",
                                   planted ? "DIFFERS from the emulator" : "agrees with the emulator"})
      EXPECT_TRUE(contains(line, part)) << line;
    EXPECT_EQ(n.fake->calls_named("compile").size(), 1u);  // one compile on the device
  }
}

// The check costs under 1 % of a Stories110M step because its program keeps the kernel's widths (the row
// layout) and at most kSelfCheckChannels rows: every surface the device sees is that small, and the planted
// row shift is still told apart.
TEST(SelfCheck, Stories110mAttnFwdIsCheckedAtItsWidthsWithFewRows) {
  kern::TrainShape s;  // Stories110M
  s.dim = 768, s.hidden = 2048, s.n_heads = 12, s.n_kv_heads = 12, s.head_dim = 64, s.seq = 256;
  const kern::KernelSpec spec = kern::build_kernel(kern::KernelKind::kAttnFwd, s, kern::Strategy::kDynamic);
  const mil::TensorType in = spec.in.type(), out = spec.out.type();
  ASSERT_GT(in.shape[1], kern::kSelfCheckChannels);
  for (const bool planted : {false, true}) {
    ane::FakeShimOptions fo;
    fo.layout_error = planted;
    Native n = make_native("m4", -1, fo);
    const kern::SelfCheck c = kern::run_self_check(*n.backend, spec.name, in, out);
    EXPECT_EQ(c.ok(), !planted) << c.line();
    EXPECT_EQ(c.checked_input.shape[3], in.shape[3]);
    EXPECT_EQ(c.checked_output.shape[3], out.shape[3]);
    EXPECT_EQ(c.checked_input.shape[1], kern::kSelfCheckChannels);
    // a row of the widest tensor is at most its fp16 bytes plus one 128-byte alignment step
    const size_t most = std::max<size_t>(49152, size_t(kern::kSelfCheckChannels) * size_t(in.shape[3] * 2 + 128));
    for (const ane::ShimCall* call : n.fake->calls_named("create_surface")) EXPECT_LE(call->bytes, most);
  }
}

TEST(SelfCheck, ReportIsJsonWithTheLinesFacts) {
  Native n = make_native("m4", -1, [] {
    ane::FakeShimOptions fo;
    fo.layout_error = true;
    return fo;
  }());
  const auto t = kern::act_type(64, 128), u = kern::act_type(200, 64);  // more output channels than input
  const kern::SelfCheck c = kern::run_self_check(*n.backend, "k", t, u);
  const std::string path = ::testing::TempDir() + "self_check.json";
  ASSERT_TRUE(kern::write_self_check_report(c, path));
  const auto j = nlohmann::json::parse(read_file_text(path));
  EXPECT_EQ(j["schema"], "anelab.self_check/1");
  EXPECT_EQ(j["device_profile"], "m4");
  EXPECT_EQ(j["kernel"], "k");
  EXPECT_EQ(j["agrees"], false);
  EXPECT_EQ(j["max_rel_diff"].get<double>(), c.max_rel_diff);
  EXPECT_EQ(j["output"], u.str());
  EXPECT_EQ(j["checked_output"], kern::act_type(64, 64).str());      // the output's width, at most 64 rows
  EXPECT_THROW(kern::run_self_check(*n.backend, "k", u, t), Error);  // an output wider than the input
}

}  // namespace
}  // namespace anelab::test
