#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/formats/checkpoint_file.h"

namespace anelab::train {
namespace {

constexpr uint64_t kMaxHeader = 16ull << 20;
using models::fnv1a64;

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}
uint64_t parse_hex64(const std::string& s, const std::string& where) {
  if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos)
    fail("checkpoint", where, ": '", s, "' is not 16 lowercase hex digits");
  return std::stoull(s, nullptr, 16);
}

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

}  // namespace

void write_checkpoint(const std::string& path, const CheckpointState& s) {
  const size_t P = s.weights.size();
  if (s.m.size() != P || s.v.size() != P) fail("checkpoint", path, ": moment sizes differ from the weights");
  uint64_t sum = models::kFnvOffset;
  for (const auto* a : {&s.weights, &s.m, &s.v}) sum = fnv1a64(sum, a->data(), P * 4);
  nlohmann::json h = {
      {"format", "anelab-checkpoint"}, {"version", models::kCheckpointVersion},
      {"model", models::checkpoint_config_to_json(s.model)}, {"n_params", P},
      {"tensors", models::checkpoint_tensors_json(s.model)}, {"step", s.step}, {"adam_t", s.adam_t},
      {"loss_scale", {{"dynamic", s.ls_dynamic}, {"scale", s.ls_scale}, {"interval", s.ls_interval},
                      {"good_steps", s.ls_good_steps}}},
      {"data", {{"batching", s.batching}, {"state", hex64(s.data_state)}}},
      {"best_val_loss", s.best_val_loss ? nlohmann::json(*s.best_val_loss) : nlohmann::json(nullptr)},
      {"restarts", s.restarts}, {"tokens", s.tokens},
      {"totals", {{"wall_s", s.wall_s}, {"compile_s", s.compile_s}, {"train_s", s.train_s}, {"compiles", s.compiles}}},
      {"config", s.config}, {"data_size", P * 12}, {"checksum", hex64(sum)}};
  const std::string js = h.dump();
  std::vector<uint8_t> head(24);
  std::memcpy(head.data(), models::kCheckpointMagic, 8);
  std::memcpy(head.data() + 8, &models::kCheckpointVersion, 4);
  const uint64_t hl = js.size();
  std::memcpy(head.data() + 16, &hl, 8);
  head.insert(head.end(), js.begin(), js.end());
  head.resize((head.size() + 63) / 64 * 64, 0);

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("checkpoint", "cannot create ", tmp, ": ", std::strerror(errno), " (does the run dir exist?)");
  try {
    write_all(fd, head.data(), head.size(), tmp);
    for (const auto* a : {&s.weights, &s.m, &s.v}) write_all(fd, a->data(), P * 4, tmp);
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
  MappedFile f(path);
  const uint8_t* d = f.data();
  const size_t n = f.size();
  if (n < 24 || !models::looks_like_checkpoint(d, n))
    fail("checkpoint", path, ": not an anelab checkpoint (magic 'ANELABCK' missing, ", n, " bytes)");
  uint32_t ver;
  uint64_t hl;
  std::memcpy(&ver, d + 8, 4);
  std::memcpy(&hl, d + 16, 8);
  if (ver < 1 || ver > models::kCheckpointVersion)
    fail("checkpoint", path, ": version ", ver, " is not supported (this build reads 1..", models::kCheckpointVersion, ")");
  if (hl == 0 || hl > kMaxHeader || 24 + hl > n) fail("checkpoint", path, ": header_len ", hl, " is out of range for a ", n, "-byte file");
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(d + 24, d + 24 + hl);
  } catch (const std::exception& e) {
    fail("checkpoint", path, ": header is not valid JSON: ", e.what());
  }
  CheckpointState s;
  try {
    if (h.at("format") != "anelab-checkpoint") fail("checkpoint", path, ": header.format is not anelab-checkpoint");
    s.model = models::checkpoint_config_from_json(h.at("model"), path);
    const uint64_t P = h.at("n_params").get<uint64_t>();
    const uint64_t off = (24 + hl + 63) / 64 * 64;
    if (P == 0 || P > (uint64_t(1) << 36) || h.at("data_size").get<uint64_t>() != P * 12 || off + P * 12 != n)
      fail("checkpoint", path, ": n_params ", P, " does not match the file size ", n, " (truncated or corrupt)");
    if (ver >= 2) models::check_checkpoint_tensors(h.at("tensors"), s.model, path);
    s.step = h.at("step").get<int64_t>();
    s.adam_t = h.at("adam_t").get<int64_t>();
    if (s.step < 0 || s.adam_t < 0 || s.adam_t > s.step) fail("checkpoint", path, ": bad step ", s.step, " / adam_t ", s.adam_t);
    const auto& ls = h.at("loss_scale");
    s.ls_dynamic = ls.at("dynamic").get<bool>();
    s.ls_scale = ls.at("scale").get<double>();
    s.ls_interval = ls.at("interval").get<double>();
    s.ls_good_steps = ls.at("good_steps").get<int64_t>();
    if (!(s.ls_scale > 0)) fail("checkpoint", path, ": loss_scale.scale ", s.ls_scale, " must be > 0");
    s.batching = h.at("data").at("batching").get<std::string>();
    s.data_state = parse_hex64(h.at("data").at("state").get<std::string>(), path + " data.state");
    if (!h.at("best_val_loss").is_null()) s.best_val_loss = h.at("best_val_loss").get<double>();
    s.restarts = h.at("restarts").get<int64_t>();
    s.tokens = h.at("tokens").get<int64_t>();
    const auto& t = h.at("totals");
    s.wall_s = t.at("wall_s").get<double>();
    s.compile_s = t.at("compile_s").get<double>();
    s.train_s = t.at("train_s").get<double>();
    s.compiles = t.at("compiles").get<int64_t>();
    s.config = h.at("config");
    const uint64_t want = parse_hex64(h.at("checksum").get<std::string>(), path + " checksum");
    if (fnv1a64(models::kFnvOffset, d + off, P * 12) != want)
      fail("checkpoint", path, ": checksum mismatch (corrupt file); use best.ckpt or start over");
    for (auto [dst, i] : {std::pair{&s.weights, 0}, {&s.m, 1}, {&s.v, 2}}) {
      dst->resize(P);
      std::memcpy(dst->data(), d + off + uint64_t(i) * P * 4, P * 4);
    }
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint", path, ": header field missing or mistyped: ", e.what());
  }
  return s;
}

}  // namespace anelab::train
