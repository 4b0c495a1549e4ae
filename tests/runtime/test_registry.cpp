// Backends are chosen by name at run time; unknown names and unavailable backends give clear errors.
#include <gtest/gtest.h>

#include "framework/backends/registry.h"
#include "framework/runtime/backend.h"

namespace anelab::rt {
namespace {

TEST(Registry, ListsEmulatorAndAne) {
  std::vector<std::string> names;
  for (const auto& b : backends()) names.push_back(b.name);
  EXPECT_EQ(names, (std::vector<std::string>{"emulator", "ane"}));
}

TEST(Registry, UnknownBackendNamesTheKnownOnes) {
  try {
    create_backend("gpu");
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("unknown backend 'gpu'"), std::string::npos) << m;
    EXPECT_NE(m.find("emulator, ane"), std::string::npos) << m;
  }
}

#if !defined(__APPLE__)
TEST(Registry, NativeAneIsUnavailableHereWithAReason) {
  try {
    create_backend("ane");
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("no Apple Neural Engine on this host"), std::string::npos) << m;
  }
}
#endif

TEST(Registry, EmulatorIsCreatedWithProfileAndBudget) {
  BackendOptions o;
  o.device = "m3";
  o.compile_budget = 3;
  auto b = create_backend("emulator", o);
  EXPECT_EQ(b->name(), "emulator");
  EXPECT_EQ(b->profile().name, "m3");
  EXPECT_EQ(b->compile_budget(), 3);
  EXPECT_EQ(b->compiles_left(), 3);
  o.device = "m7";
  EXPECT_THROW(create_backend("emulator", o), Error);
}

}  // namespace
}  // namespace anelab::rt
