// Atomic writes, mmap reads and .npy parsing, including malformed input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/npy.h"
#include "tests/common/test_data.h"

namespace anelab {
namespace {

TEST(Files, AtomicWriteReplacesAndLeavesNoTemp) {
  auto dir = test::temp_dir("files");
  std::string p = (dir / "a.txt").string();
  write_file_atomic(p, std::string_view("first"));
  write_file_atomic(p, std::string_view("second"));
  EXPECT_EQ(read_file_text(p), "second");
  int n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) (void)e, ++n;
  EXPECT_EQ(n, 1);
}

TEST(Files, FailedAtomicWriteKeepsOldFile) {
  auto dir = test::temp_dir("files2");
  std::string p = (dir / "keep.txt").string();
  write_file_atomic(p, std::string_view("precious"));
  // Writing into a directory that does not exist fails before touching the target.
  EXPECT_THROW(write_file_atomic((dir / "missing" / "keep.txt").string(), std::string_view("x")), Error);
  EXPECT_EQ(read_file_text(p), "precious");
}

TEST(Files, MissingFileErrorNamesPath) {
  try {
    read_file_bytes("/nonexistent/anelab/file.bin");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/anelab/file.bin"), std::string::npos);
  }
}

TEST(Npy, WriteReadRoundTrip) {
  auto dir = test::temp_dir("npy");
  std::vector<float> v(2 * 3 * 5);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5f * static_cast<float>(i) - 3.0f;
  std::string p = (dir / "x.npy").string();
  write_npy(p, {2, 3, 5}, v.data());
  NpyArray a = read_npy(p);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3, 5}));
  EXPECT_EQ(a.data, v);
  write_npy(p, {7}, v.data());
  EXPECT_EQ(read_npy(p).shape, (std::vector<int64_t>{7}));
}

TEST(Npy, MalformedFilesAreRejected) {
  auto dir = test::temp_dir("npy_bad");
  std::vector<float> v(8, 1.0f);
  std::string p = (dir / "ok.npy").string();
  write_npy(p, {8}, v.data());
  auto bytes = read_file_bytes(p);
  // Truncations at every length must be rejected, never crash.
  for (size_t len = 0; len < bytes.size(); ++len) EXPECT_THROW(parse_npy(bytes.data(), len, "t"), Error) << len;
  auto bad = bytes;
  bad[1] = 'X';
  EXPECT_THROW(parse_npy(bad.data(), bad.size(), "t"), Error);
  std::string s(bytes.begin(), bytes.end());
  auto pos = s.find("<f4");
  s.replace(pos, 3, "<i8");
  EXPECT_THROW(parse_npy(reinterpret_cast<const uint8_t*>(s.data()), s.size(), "t"), Error);
}

}  // namespace
}  // namespace anelab
