#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iterator>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/platform.h"
#include "models/arch/arch.h"
#include "models/arch/tensors.h"
#include "train/run_dir.h"

namespace anelab::train {
namespace {

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("checkpoint", "cannot write ", path, ": ", std::strerror(errno));
    p += w;
    n -= size_t(w);
  }
}

// The writer pid of a temp file named NAME.tmp.<pid> (as write_checkpoint and write_file_atomic name
// them) where NAME is one of the trainer's own files (kRunFiles), or -1 for any other name.
int64_t temp_file_pid(const std::string& name) {
  const size_t at = name.rfind(".tmp.");
  if (at == std::string::npos || at == 0) return -1;
  if (std::find(std::begin(kRunFiles), std::end(kRunFiles), name.substr(0, at)) == std::end(kRunFiles)) return -1;
  const std::string digits = name.substr(at + 5);
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

}  // namespace

void write_checkpoint(const std::string& path, const CheckpointState& s, const WeightSource& weights) {
  const std::vector<models::TensorSpec> tensors = models::canonical_tensors(s.model);
  const auto P = size_t(models::checked_numel(tensors, path));
  if (weights ? !s.weights.empty() : s.weights.size() != P)
    fail("checkpoint", path, ": ", weights ? s.weights.size() : P, " weights, but the model config implies ", P);
  const bool zero_moments = s.m.empty() && s.v.empty();
  if (!zero_moments && (s.m.size() != P || s.v.size() != P))
    fail("checkpoint", path, ": moment sizes differ from the weights");
  // The data section (weights, m, v) in chunks: the weights made by `weights` or read from s.weights, the moments
  // zeros when none are given; each chunk goes to `put`. Two passes: the checksum (in the header), then the file.
  std::vector<float> chunk(std::min<size_t>(P, size_t(1) << 20), 0.0f);
  auto data = [&](const std::function<void(const float*, size_t)>& put) {
    for (size_t i = 0; i < P; i += chunk.size()) {
      const size_t n = std::min(chunk.size(), P - i);
      if (weights)
        weights(int64_t(i), int64_t(n), chunk.data()), put(chunk.data(), n);
      else
        put(s.weights.data() + i, n);
    }
    if (!zero_moments) return put(s.m.data(), P), put(s.v.data(), P);
    std::fill(chunk.begin(), chunk.end(), 0.0f);
    for (size_t i = 0; i < 2 * P; i += chunk.size()) put(chunk.data(), std::min(chunk.size(), 2 * P - i));
  };
  uint64_t sum = models::kFnvOffset;
  data([&](const float* p, size_t n) { sum = models::fnv1a64(sum, p, n * 4); });
  const std::vector<uint8_t> head = models::encode_checkpoint_header(s, tensors, sum);

  const std::string tmp = path + ".tmp." + std::to_string(platform::process_id());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("checkpoint", "cannot create ", tmp, ": ", std::strerror(errno), " (does the run dir exist?)");
  try {
    write_all(fd, head.data(), head.size(), tmp);
    data([&](const float* p, size_t n) { write_all(fd, p, n * 4, tmp); });
    if (::fsync(fd) != 0) fail("checkpoint", "fsync ", tmp, ": ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    fail("checkpoint", "cannot rename ", tmp, " to ", path, ": ", std::strerror(errno));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

CheckpointState read_checkpoint(const std::string& path) {
  const MappedFile f(path);
  const models::CheckpointView v = models::parse_checkpoint(f.data(), f.size(), path, models::canonical_tensors);
  models::validate_config(v.header.model, path);  // the reader checked the generic fields; the architecture here
  CheckpointState s;
  static_cast<models::CheckpointHeader&>(s) = v.header;
  models::drop_legacy_params(&s.model);
  const size_t P = size_t(v.n_params);
  for (auto [dst, i] : {std::pair{&s.weights, 0}, {&s.m, 1}, {&s.v, 2}}) {
    dst->resize(P);
    std::memcpy(dst->data(), v.weights + size_t(i) * P * 4, P * 4);
  }
  return s;
}

int remove_stale_temp_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int removed = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t pid = temp_file_pid(e.path().filename().string());
    if (pid <= 0 || !e.is_regular_file(ec) || platform::process_alive(pid)) continue;
    if (fs::remove(e.path(), ec)) ++removed;
  }
  return removed;
}

}  // namespace anelab::train
