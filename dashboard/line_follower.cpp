#include "dashboard/line_follower.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace anelab::dashboard {
namespace {
constexpr size_t kHeadBytes = 256;

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// pread the whole range or fail; returns bytes read (short only at EOF).
ssize_t read_at(int fd, char* buf, size_t n, uint64_t off) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, buf + got, n - got, static_cast<off_t>(off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(got);
}
}  // namespace

void LineFollower::restart() {
  offset_ = 0;
  line_no_ = 0;
  have_id_ = false;
  discarding_ = false;
  head_.clear();
  pending_.clear();
}

bool LineFollower::head_changed(int fd, uint64_t size) const {
  if (head_.empty()) return false;
  if (size < head_.size()) return true;
  std::string now(head_.size(), '\0');
  ssize_t r = read_at(fd, now.data(), now.size(), 0);
  return r != static_cast<ssize_t>(now.size()) || now != head_;
}

void LineFollower::consume(const char* data, size_t n, PollResult& out) {
  size_t start = 0;
  for (size_t i = 0; i < n; ++i) {
    if (data[i] != '\n') continue;
    ++line_no_;
    if (discarding_) {
      discarding_ = false;  // the over-long line was already reported
    } else if (pending_.size() + (i - start) > kMaxLine) {
      pending_.append(data + start, std::min<size_t>(i - start, 200));
      pending_.resize(std::min<size_t>(pending_.size(), 200));
      out.lines.push_back({line_no_, std::move(pending_), true});
    } else {
      pending_.append(data + start, i - start);
      if (!pending_.empty() && pending_.back() == '\r') pending_.pop_back();
      out.lines.push_back({line_no_, std::move(pending_), false});
    }
    pending_.clear();
    start = i + 1;
  }
  if (start < n && !discarding_) {
    pending_.append(data + start, n - start);
    if (pending_.size() > kMaxLine) {
      // Report it once (numbered as the line it is), then drop bytes until its newline.
      pending_.resize(200);
      out.lines.push_back({line_no_ + 1, std::move(pending_), true});
      pending_.clear();
      discarding_ = true;
    }
  }
}

PollResult LineFollower::poll(size_t max_bytes) {
  PollResult out;
  Fd f;
  f.fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) {
    if (errno != ENOENT && errno != ENOTDIR) out.error = std::string("cannot open: ") + std::strerror(errno);
    if (offset_ > 0 || have_id_) {  // the file went away: start over when it comes back
      restart();
      ++resets_;
      out.reset = true;
    }
    return out;
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) {
    out.error = std::string("cannot stat: ") + std::strerror(errno);
    return out;
  }
  out.exists = true;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  // dev_t is int on macOS, unsigned long on Linux: compare as uint64_t.
  const bool replaced =
      have_id_ && (static_cast<uint64_t>(st.st_dev) != dev_ || static_cast<uint64_t>(st.st_ino) != ino_);
  if (replaced || size < offset_ || head_changed(f.fd, size)) {
    restart();
    ++resets_;
    out.reset = true;
  }
  dev_ = static_cast<uint64_t>(st.st_dev);
  ino_ = static_cast<uint64_t>(st.st_ino);
  have_id_ = true;
  if (size <= offset_) return out;
  size_t want = static_cast<size_t>(std::min<uint64_t>(size - offset_, max_bytes));
  std::string buf(want, '\0');
  ssize_t r = read_at(f.fd, buf.data(), want, offset_);
  if (r < 0) {
    out.error = std::string("read failed: ") + std::strerror(errno);
    return out;
  }
  buf.resize(static_cast<size_t>(r));
  if (head_.size() < kHeadBytes && offset_ == head_.size()) {
    head_.append(buf, 0, std::min(buf.size(), kHeadBytes - head_.size()));
  }
  offset_ += buf.size();
  consume(buf.data(), buf.size(), out);
  return out;
}

}  // namespace anelab::dashboard
