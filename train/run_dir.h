// What the trainer may do to a run directory:
//   - one writer at a time: DIR/run.lock, an exclusive lock (platform::lock_file) held from the start of
//     the run until the process ends, across exec-restarts (the descriptor survives exec and the restarted
//     process takes the lock again, which succeeds for the same process); the kernel drops it when the
//     process dies, so a kill -9 never leaves the run locked. Under MPI only rank 0 writes, so only rank 0
//     locks (a relaunch by the launcher loop is a new process that takes it again).
//   - a fresh start only in a missing or empty directory, or one that is an anelab run (holds best.ckpt,
//     last.ckpt or events.jsonl); anything else (a Hugging Face model directory, ...) needs --force.
//   - the trainer's own files are kRunFiles; only their temporary names (NAME.tmp.<pid>, see
//     write_file_atomic) are ever deleted, and only when the writer pid is dead (train/checkpoint.h).
#pragma once
#include <string>
#include <utility>

#include "framework/core/platform.h"

namespace anelab::train {

inline constexpr const char* kRunLockFile = "run.lock";
// The files the trainer writes atomically into a run directory (events.jsonl is appended, never renamed).
inline constexpr const char* kRunFiles[] = {"last.ckpt",        "best.ckpt", "config.json", "config.toml",
                                            "tokenizer.anetok", "last.lora", "best.lora"};

// DIR/run.lock held for the life of this object. The constructor (DIR must exist) throws "[train] run dir DIR
// is in use by another trainer (pid N, ...)" when another process holds it, or names the file and the OS
// error when it cannot be taken.
class RunDirLock {
 public:
  RunDirLock() = default;
  explicit RunDirLock(const std::string& dir);
  ~RunDirLock() { platform::release_file_lock(l_); }
  RunDirLock(RunDirLock&& o) noexcept : l_(std::exchange(o.l_, {})) {}
  RunDirLock& operator=(RunDirLock&& o) noexcept {
    std::swap(l_, o.l_);
    return *this;
  }
  bool held() const { return l_.fd >= 0; }

 private:
  platform::FileLock l_;
};
// Throws unless a fresh run may write into dir: missing, empty, an anelab run, or force.
void check_fresh_run_dir(const std::string& dir, bool force);

}  // namespace anelab::train
