// The op registry is the single meaning of an op: every registered op is lowered by the emulator or
// listed (with its reason) in emu::unlowered_ops(), and the emulator lowers nothing the registry does
// not declare.
#include <gtest/gtest.h>

#include <algorithm>

#include "framework/backends/registry.h"
#include "framework/emulator/emulator.h"
#include "framework/mil/ops.h"
#include "tests/emulator/op_harness.h"

namespace anelab::test {
namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

bool listed_unlowered(const std::string& op) {
  for (const auto& u : emu::unlowered_ops())
    if (u.op == op) return true;
  return false;
}

TEST(EmulatorOpCoverage, EveryRegisteredOpIsLoweredOrListed) {
  const auto lowered = emu::lowered_ops();
  for (const auto& spec : mil::all_ops())
    EXPECT_TRUE(contains(lowered, spec.name) != listed_unlowered(spec.name))
        << spec.name << ": registered ops must be lowered by the emulator or listed in emu::unlowered_ops() (not both)";
}

TEST(EmulatorOpCoverage, EveryLoweredOpIsRegistered) {
  for (const auto& op : emu::lowered_ops())
    EXPECT_NE(mil::find_op(op), nullptr) << op << " is lowered but not in the op registry";
}

TEST(EmulatorOpCoverage, ExceptionsAreRegisteredAndGiveAReason) {
  for (const auto& u : emu::unlowered_ops()) {
    EXPECT_NE(mil::find_op(u.op), nullptr) << u.op;
    EXPECT_GT(u.reason.size(), 20u) << u.op;
  }
}

// A registered but unlowered op is a compile error naming the op and the reason, not a crash.
TEST(EmulatorOpCoverage, UnloweredOpFailsWithItsReason) {
  ProgramUnderTest p;
  auto x = p.input("x", {1, 32, 1, 64}, Vec(64 * 32, 1.0));
  p.b->output(p.b->layer_norm(x, {1}));
  auto be = rt::create_backend("emulator", {});
  auto k = be->compile(p.pb.build(), p.weights());
  ASSERT_FALSE(k.is_ok());
  const std::string msg = k.status().message();
  EXPECT_NE(msg.find("layer_norm"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not implemented by the emulator"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unmeasured"), std::string::npos) << msg;
}

}  // namespace
}  // namespace anelab::test
