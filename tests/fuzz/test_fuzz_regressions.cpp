// Replays the inputs the fuzzers found (tests/fuzz/regressions/<target>/<input>) through the same entry
// points as the harnesses: each must end in a clean anelab::Error (rejected), or be accepted when its file
// name contains ".accept" (a valid file that used to crash the reader). A crash, a sanitizer report or any
// other exception fails the test; the instrumented build (build-fuzz) and the ASan/UBSan build run it too.
#include <gtest/gtest.h>

#include <filesystem>
#include <ostream>

#include "framework/core/file.h"
#include "tests/common/test_data.h"
#include "tests/fuzz/targets.h"

namespace anelab::fuzz {

void PrintTo(const Target& t, std::ostream* os) { *os << t.name; }  // gtest's name for a parameter

namespace {
namespace fs = std::filesystem;

fs::path inputs_dir(const Target& t) { return test::source_path("tests/fuzz/regressions/" + std::string(t.name)); }

// The targets with kept inputs.
std::vector<Target> with_inputs() {
  std::vector<Target> out;
  for (const Target& t : targets())
    if (fs::is_directory(inputs_dir(t))) out.push_back(t);
  return out;
}

class FuzzRegressions : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzRegressions, KeptInputsEndCleanly) {
  const Target& t = GetParam();
  const fs::path dir = inputs_dir(t);
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const std::vector<uint8_t> b = read_file_bytes(e.path().string());
    const int want = name.find(".accept") != std::string::npos ? 0 : 1;
    int got = -1;
    EXPECT_NO_THROW(got = t.run(b.data(), b.size())) << t.what << " " << name;
    EXPECT_EQ(got, want) << t.what << " " << name << (want ? " should be rejected" : " should be accepted");
    ++n;
  }
  EXPECT_GT(n, 0) << dir;
}

INSTANTIATE_TEST_SUITE_P(Readers, FuzzRegressions, ::testing::ValuesIn(with_inputs()),
                         [](const ::testing::TestParamInfo<Target>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace anelab::fuzz
