// Locating the shared reference data (../shared/data next to the checkout, or $ANELAB_DATA).
// Tests that need it call ANELAB_REQUIRE_DATA("llama2c/stories260K.bin") which skips with a message
// naming the missing file instead of failing.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

namespace anelab::test {

inline std::string data_dir() {
  if (const char* env = std::getenv("ANELAB_DATA")) return env;
  return ANELAB_DATA_DIR;
}

inline std::string data_path(const std::string& rel) { return data_dir() + "/" + rel; }

inline std::string source_path(const std::string& rel) { return std::string(ANELAB_SOURCE_DIR) + "/" + rel; }

// The temporary directories this test process made; removed when it exits normally after its tests
// passed. Kept (and named on stderr) when a test failed or ANELAB_KEEP_TEST_TMP is set; a crash leaves them.
struct TempDirs {
  std::vector<std::filesystem::path> made;
  ~TempDirs() {
    if (std::getenv("ANELAB_KEEP_TEST_TMP") || ::testing::UnitTest::GetInstance()->Failed()) {
      for (const auto& p : made)
        if (std::filesystem::exists(p)) std::fprintf(stderr, "[test] kept %s\n", p.string().c_str());
      return;
    }
    std::error_code ec;
    for (const auto& p : made) std::filesystem::remove_all(p, ec);
  }
};
inline TempDirs& temp_dirs() {
  static TempDirs dirs;
  return dirs;
}

// A fresh, empty temporary directory for one test: the process id in its name, since ctest -j runs tests in
// separate processes whose stack addresses coincide where there is no ASLR (qemu-user).
inline std::filesystem::path temp_dir(const std::string& tag) {
  auto p = std::filesystem::temp_directory_path() / ("anelab_test_" + tag + "_" + std::to_string(::getpid()) + "_" +
                                                     std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                                     "_" + std::to_string(reinterpret_cast<uintptr_t>(&tag)));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  temp_dirs().made.push_back(p);
  return p;
}

// Writes `text` to `path` (creating its directories), e.g. a file of a fake procfs/sysfs tree.
inline void put(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream f(path, std::ios::trunc);
  f << text;
}

// s single-quoted for sh (a ' inside becomes '\'').
inline std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace anelab::test

#define ANELAB_REQUIRE_DATA(rel)                                                         \
  do {                                                                                   \
    if (!std::filesystem::exists(::anelab::test::data_path(rel)))                        \
      GTEST_SKIP() << "reference data missing: " << ::anelab::test::data_path(rel)       \
                   << " (set ANELAB_DATA or place ../shared/data next to the checkout)"; \
  } while (0)
