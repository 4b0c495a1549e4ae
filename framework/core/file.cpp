#include "framework/core/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/platform.h"

namespace anelab {

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  MappedFile m(path);
  return std::vector<uint8_t>(m.data(), m.data() + m.size());
}

std::string read_file_text(const std::string& path) {
  MappedFile m(path);
  return std::string(reinterpret_cast<const char*>(m.data()), m.size());
}

void write_file_atomic(const std::string& path, const void* data, size_t size) {
  std::string tmp = path + ".tmp." + std::to_string(platform::process_id());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("file", "cannot create ", tmp, ": ", std::strerror(errno));
  const auto* p = static_cast<const uint8_t*>(data);
  size_t left = size;
  while (left > 0) {
    ssize_t w = ::write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("file", "cannot write ", tmp, ": ", std::strerror(e));
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("file", "cannot flush ", tmp, ": ", std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("file", "cannot rename ", tmp, " to ", path, ": ", std::strerror(e));
  }
}

namespace {
const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}
}  // namespace

void require_regular_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("file", "cannot open ", path, ": ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("file", path, " is ", file_kind(st.st_mode), ", expected a regular file");
}

const char* file_access_name(FileAccess a) { return a == FileAccess::kRead ? "read" : "mmap"; }

MappedFile::MappedFile(const std::string& path, FileAccess access) : path_(path), access_(access) {
  require_regular_file(path);
  // O_NONBLOCK: a path swapped for a FIFO after the check still does not block the open.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail("file", "cannot open ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("file", "cannot stat ", path, ": ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("file", path, " is ", file_kind(st.st_mode), ", expected a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0 && access_ == FileAccess::kRead) {
    auto r = platform::map_anonymous(size_, /*huge_pages=*/true);
    if (!r) {
      ::close(fd);
      fail("file", "cannot read ", path, " into memory: ", r.reason);
    }
    region_ = std::move(*r.value);
    auto* dst = static_cast<uint8_t*>(region_.data);
    // Large files are read by up to 8 threads, one contiguous 2 MiB-aligned range each: the copy and the
    // kernel's zeroing of each fresh huge page then run in parallel (one thread: ~0.2 s per GB from the page
    // cache on the dev box). The first failing range (lowest offset) is reported.
    constexpr size_t kPerThread = size_t{64} << 20, kAlign = size_t{2} << 20;
    const size_t parts =
        std::clamp<size_t>(size_ / kPerThread, 1, std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8));
    const size_t step = (size_ / parts + kAlign - 1) / kAlign * kAlign;
    std::vector<size_t> stopped(parts, SIZE_MAX);  // per range: where it stopped, SIZE_MAX when complete
    std::vector<int> err(parts, 0);
    auto read_range = [&](size_t i) {
      size_t off = i * step;
      const size_t end = std::min(size_, off + step);
      while (off < end) {
        const ssize_t n = ::pread(fd, dst + off, end - off, static_cast<off_t>(off));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          stopped[i] = off, err[i] = n < 0 ? errno : 0;
          return;
        }
        off += static_cast<size_t>(n);
      }
    };
    {
      std::vector<std::thread> threads;  // (not std::jthread: libc++ before 18 keeps it experimental)
      for (size_t i = 1; i < parts; ++i) {
        try {
          threads.emplace_back(read_range, i);
        } catch (const std::system_error&) {  // no thread to be had: this one reads the range
          read_range(i);
        }
      }
      read_range(0);
      for (auto& t : threads) t.join();
    }
    for (size_t i = 0; i < parts; ++i) {
      if (stopped[i] == SIZE_MAX) continue;
      ::close(fd);
      platform::unmap_anonymous(region_);
      fail("file", path, ": read stopped at ", stopped[i], " of ", size_, " bytes",
           err[i] ? std::string(": ") + std::strerror(err[i]) : std::string(" (the file shrank)"));
    }
    data_ = dst;
  } else if (size_ > 0) {
    const auto p = platform::map_file_readonly(fd, size_);
    if (!p) {
      ::close(fd);
      fail("file", "cannot mmap ", path, ": ", p.reason);
    }
    data_ = static_cast<const uint8_t*>(*p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(o.data_), size_(o.size_), path_(std::move(o.path_)), access_(o.access_), region_(std::move(o.region_)) {
  o.data_ = nullptr;
  o.size_ = 0;
  o.region_ = platform::AnonRegion{};
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    release();
    data_ = o.data_;
    size_ = o.size_;
    path_ = std::move(o.path_);
    access_ = o.access_;
    region_ = std::move(o.region_);
    o.data_ = nullptr;
    o.size_ = 0;
    o.region_ = platform::AnonRegion{};
  }
  return *this;
}

void MappedFile::release() {
  if (region_.base)
    platform::unmap_anonymous(region_);
  else if (data_)
    platform::unmap_file(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace anelab
