// LineFollower: incremental reader of a growing, line-oriented file (the trainer's events.jsonl).
//
// Each poll() reads what was appended since the last poll and returns the complete lines
// ('\n'-terminated; a trailing '\r' is removed). A partly written last line stays pending until its
// newline arrives. The follower starts over from the beginning (and says so with `reset`) when the
// file shrinks (truncation), is replaced (different inode) or its first bytes change (rewritten in
// place). A line longer than kMaxLine is reported as an over-long line and skipped, so a binary or
// newline-free file cannot grow memory without bound. A missing file is not an error: the run
// directory may exist before the trainer writes its first event.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace anelab::dashboard {

struct FollowedLine {
  uint64_t number = 0;    // 1-based line number in the file
  std::string text;       // without the line terminator
  bool too_long = false;  // the line exceeded LineFollower::kMaxLine and was cut to its first bytes
};

struct PollResult {
  bool reset = false;   // the file was truncated/replaced: everything read before is void
  bool exists = false;  // the file exists now
  std::vector<FollowedLine> lines;
  std::string error;  // an I/O error other than "file missing" (e.g. permission denied)
};

class LineFollower {
 public:
  static constexpr size_t kMaxLine = 16u << 20;      // longest line kept
  static constexpr size_t kDefaultChunk = 8u << 20;  // most bytes read by one poll

  explicit LineFollower(std::string path) : path_(std::move(path)) {}

  PollResult poll(size_t max_bytes = kDefaultChunk);
  void restart();  // forget everything; the next poll reads from the start

  const std::string& path() const { return path_; }
  uint64_t offset() const { return offset_; }               // bytes consumed (incl. pending)
  size_t pending_bytes() const { return pending_.size(); }  // bytes of the unterminated last line
  uint64_t lines_read() const { return line_no_; }
  uint64_t resets() const { return resets_; }

 private:
  bool head_changed(int fd, uint64_t size) const;
  void consume(const char* data, size_t n, PollResult& out);

  std::string path_;
  uint64_t offset_ = 0;
  uint64_t line_no_ = 0;
  uint64_t dev_ = 0, ino_ = 0;
  bool have_id_ = false;
  bool discarding_ = false;  // inside an over-long line: drop bytes until the next newline
  std::string head_;         // first bytes of the file as read (to detect in-place rewrites)
  std::string pending_;
  uint64_t resets_ = 0;
};

}  // namespace anelab::dashboard
