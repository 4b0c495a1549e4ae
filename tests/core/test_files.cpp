// Atomic writes, mmap reads, reads into memory (FileAccess::kRead) and .npy parsing, including malformed input.
#include <gtest/gtest.h>

#include <cstring>
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

// FileAccess::kRead gives the same bytes as the mapping, in its own 2 MiB-aligned memory that survives moves,
// also when several threads read a large file; empty files stay empty; directories are refused.
TEST(Files, ReadIntoMemoryMatchesTheMapping) {
  auto dir = test::temp_dir("files_read");
  const std::string p = (dir / "w.bin").string();
  std::vector<uint8_t> bytes((size_t{3} << 20) + 777);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  write_file_atomic(p, bytes.data(), bytes.size());
  const MappedFile mapped(p);
  MappedFile read(p, FileAccess::kRead);
  EXPECT_EQ(mapped.access(), FileAccess::kMap);
  EXPECT_EQ(read.access(), FileAccess::kRead);
  ASSERT_EQ(read.size(), bytes.size());
  EXPECT_NE(read.data(), mapped.data());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(read.data()) % (size_t{2} << 20), 0u);
  EXPECT_EQ(std::memcmp(read.data(), bytes.data(), bytes.size()), 0);
  EXPECT_EQ(std::memcmp(read.data(), mapped.data(), bytes.size()), 0);
  EXPECT_FALSE(mapped.huge_pages());
  MappedFile moved(std::move(read));
  EXPECT_EQ(read.data(), nullptr);
  EXPECT_EQ(read.size(), 0u);
  ASSERT_EQ(moved.size(), bytes.size());
  EXPECT_EQ(moved.access(), FileAccess::kRead);
  EXPECT_EQ(moved.data()[bytes.size() - 1], bytes.back());
  MappedFile assigned;
  assigned = std::move(moved);
  EXPECT_EQ(std::memcmp(assigned.data(), bytes.data(), bytes.size()), 0);
  write_file_atomic((dir / "empty.bin").string(), std::string_view(""));
  const MappedFile empty((dir / "empty.bin").string(), FileAccess::kRead);
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_THROW(MappedFile(dir.string(), FileAccess::kRead), Error);  // a directory, refused before reading
  // A file large enough to be read by several threads (64 MiB or more per range): a marker (its own offset)
  // every MiB, zeros between, and an odd tail; every marker must land where the file has it.
  const std::string big = (dir / "big.bin").string();
  constexpr uint64_t kBig = (uint64_t{200} << 20) + 4321;
  {
    std::ofstream f(big, std::ios::binary);
    for (uint64_t off = 0; off + 8 <= kBig; off += uint64_t{1} << 20) {
      f.seekp(static_cast<std::streamoff>(off));
      f.write(reinterpret_cast<const char*>(&off), 8);
    }
    f.seekp(static_cast<std::streamoff>(kBig - 1));
    f.put('\x5a');
  }
  const MappedFile whole(big, FileAccess::kRead);
  ASSERT_EQ(whole.size(), kBig);
  for (uint64_t off = 0; off + 8 <= kBig; off += uint64_t{1} << 20) {
    uint64_t v = 0;
    std::memcpy(&v, whole.data() + off, 8);
    ASSERT_EQ(v, off) << "marker at " << off;
    ASSERT_EQ(whole.data()[off + 8], 0) << off + 8;
  }
  EXPECT_EQ(whole.data()[kBig - 1], 0x5a);
  EXPECT_STREQ(file_access_name(FileAccess::kRead), "read");
  EXPECT_STREQ(file_access_name(FileAccess::kMap), "mmap");
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
