#include "train/run_dir.h"

#include <filesystem>

#include "framework/core/error.h"
#include "models/formats/checkpoint_file.h"

namespace anelab::train {

RunDirLock::RunDirLock(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kRunLockFile).string();
  platform::FileLock l = platform::lock_file(path);
  if (l.holder_pid != 0)
    fail("train", "run dir ", dir, " is in use by another trainer (pid ",
         l.holder_pid > 0 ? std::to_string(l.holder_pid) : std::string("unknown"), ", holding ", path,
         "): wait for it to finish or stop it, or choose another --run-dir");
  if (l.fd < 0) fail("train", "run dir ", dir, ": ", l.error);
  l_ = l;
}

void check_fresh_run_dir(const std::string& dir, bool force) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (force || !fs::exists(dir, ec) || models::is_run_dir(dir) || fs::exists(fs::path(dir) / kRunLockFile, ec)) return;
  if (!fs::is_directory(dir, ec)) fail("train", "--run-dir ", dir, " exists and is not a directory");
  if (fs::is_empty(dir, ec)) return;
  fail("train", "--run-dir ", dir,
       " is a non-empty directory that is not an anelab run (no best.ckpt, last.ckpt or events.jsonl): "
       "choose another --run-dir, or pass --force to write the run's files into it");
}

}  // namespace anelab::train
