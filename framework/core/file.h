// File helpers shared by every reader and writer: whole-file reads with context-rich errors,
// atomic writes (temp file + fsync + rename, so nothing on disk is lost on failure), read-only views of a whole
// file (mmap, or read into huge-page memory: FileAccess).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "framework/core/platform.h"

namespace anelab {

// Throws "[file] PATH is a FIFO (named pipe), not a regular file" (or a directory, device, socket) without
// opening it (stat), so a FIFO or a terminal given as an input never blocks a reader. MappedFile, and with it
// every model, tokenizer, data and checkpoint reader, checks this first.
void require_regular_file(const std::string& path);

// Reads a whole file; throws anelab::Error("[file] cannot open PATH: reason").
std::vector<uint8_t> read_file_bytes(const std::string& path);
std::string read_file_text(const std::string& path);

// Writes data to path atomically: PATH.tmp.<pid> is written, fsync'ed and renamed over PATH.
// Creates no directories. Throws anelab::Error on failure (the old file stays intact).
void write_file_atomic(const std::string& path, const void* data, size_t size);
inline void write_file_atomic(const std::string& path, std::string_view text) {
  write_file_atomic(path, text.data(), text.size());
}

// How MappedFile brings a file into memory.
enum class FileAccess {
  kMap,   // mmap: pages come from the page cache on first touch, shared with other processes, 4 KiB TLB entries
  kRead,  // read into anonymous memory with huge pages advised (platform::map_anonymous): the whole file is
          // read at open and the process holds its own copy; a decode streaming every weight per token
          // takes ~1 TLB miss per 2 MiB instead of per 4 KiB (Qwen2.5-0.5B q8_0, 2 threads: docs/quantization.md)
};
const char* file_access_name(FileAccess a);  // "mmap" | "read"

// A read-only view of a whole regular file (empty files give size 0; anything else is refused): mapped, or
// read into anonymous memory (FileAccess::kRead; "[file] PATH: read stopped at N of M bytes" when it shrinks).
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path, FileAccess access = FileAccess::kMap);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  FileAccess access() const { return access_; }
  // kRead: the huge-page advice taken ("THP madvise") or why there is none; kMap: unavailable.
  const platform::Reading<std::string>& huge_pages() const { return region_.huge_pages; }

 private:
  void release();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  FileAccess access_ = FileAccess::kMap;
  platform::AnonRegion region_;  // kRead: the memory holding the copy
};

}  // namespace anelab
