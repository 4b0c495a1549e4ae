#include "models/formats/checkpoint_header.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "framework/core/error.h"
#include "models/formats/model_config_json.h"

namespace anelab::models {
using json = nlohmann::json;

uint64_t fnv1a64(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

namespace {

constexpr int64_t kMaxCount = int64_t{1} << 53;  // steps, tokens, ...: exact in a double, far beyond any run
constexpr double kMaxSeconds = 1e12;

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

// A header value for an error line: primitives as JSON (cut at 80 characters), never a container (its dump
// could be deep and long).
std::string shown(const json& v) {
  if (v.is_object()) return "an object";
  if (v.is_array()) return "an array";
  std::string s = v.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// Strict readers of one header field: the JSON type must be exactly the expected one (no bool -> int, no
// float -> int, no string -> number) and the value inside [lo, hi]. `key` is the dotted path for errors.
class HeaderFields {
 public:
  HeaderFields(const json& obj, std::string prefix, const std::string& where)
      : obj_(obj), prefix_(std::move(prefix)), where_(where) {
    if (!obj_.is_object()) bad(prefix_.empty() ? "header" : prefix_.substr(0, prefix_.size() - 1), "is not an object");
  }
  const json& at(const char* key) const {
    const auto it = obj_.find(key);
    if (it == obj_.end()) fail("checkpoint", where_, ": header field ", prefix_, key, " is missing");
    return *it;
  }
  int64_t integer(const char* key, int64_t lo, int64_t hi) const {
    const json& v = at(key);
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)))
      bad(key, v, "is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) bad(key, v, "is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
  }
  double number(const char* key, double lo, double hi) const {
    const json& v = at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>())) bad(key, v, "is not a finite number");
    const double x = v.get<double>();
    if (!(x >= lo && x <= hi)) bad(key, v, "is outside [" + json(lo).dump() + ", " + json(hi).dump() + "]");
    return x;
  }
  bool boolean(const char* key) const {
    const json& v = at(key);
    if (!v.is_boolean()) bad(key, v, "is not true or false");
    return v.get<bool>();
  }
  std::string string(const char* key) const {
    const json& v = at(key);
    if (!v.is_string()) bad(key, v, "is not a string");
    return v.get<std::string>();
  }
  uint64_t hex(const char* key) const {
    const std::string s = string(key);
    if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos)
      bad(key, json(s), "is not 16 lowercase hex digits");
    return std::stoull(s, nullptr, 16);
  }
  [[noreturn]] void bad(const char* key, const json& v, const std::string& why) const {
    fail("checkpoint", where_, ": header field ", prefix_, key, " = ", shown(v), " ", why);
  }
  [[noreturn]] void bad(const std::string& what, const char* why) const {
    fail("checkpoint", where_, ": ", what, " ", why);
  }

 private:
  const json& obj_;
  std::string prefix_;
  const std::string& where_;
};

void read_training_fields(const HeaderFields& f, const std::string& where, CheckpointHeader* h) {
  h->step = f.integer("step", 0, kMaxCount);
  h->adam_t = f.integer("adam_t", 0, h->step);
  const HeaderFields ls(f.at("loss_scale"), "loss_scale.", where);
  h->ls_dynamic = ls.boolean("dynamic");
  h->ls_scale = ls.number("scale", std::numeric_limits<double>::min(), std::numeric_limits<double>::max());
  h->ls_interval = ls.number("interval", 1, double(kMaxCount));  // versions 1-2 wrote it as a float
  if (std::floor(h->ls_interval) != h->ls_interval) ls.bad("interval", ls.at("interval"), "is not a whole number");
  h->ls_good_steps = ls.integer("good_steps", 0, kMaxCount);
  const HeaderFields d(f.at("data"), "data.", where);
  h->batching = d.string("batching");
  if (h->batching != "random" && h->batching != "sequential")
    d.bad("batching", json(h->batching), "is not random or sequential");
  h->data_state = d.hex("state");
  if (!f.at("best_val_loss").is_null())
    h->best_val_loss = f.number("best_val_loss", 0, std::numeric_limits<double>::max());
  h->restarts = f.integer("restarts", 0, kMaxCount);
  h->tokens = f.integer("tokens", 0, kMaxCount);
  const HeaderFields t(f.at("totals"), "totals.", where);
  h->wall_s = t.number("wall_s", 0, kMaxSeconds);
  h->compile_s = t.number("compile_s", 0, kMaxSeconds);
  h->train_s = t.number("train_s", 0, kMaxSeconds);
  h->compiles = t.integer("compiles", 0, kMaxCount);
  h->config = f.at("config");
  if (!h->config.is_object()) f.bad("config", h->config, "is not an object");
}

void check_tensor_table(const json& tensors, const std::vector<TensorSpec>& specs, const std::string& where) {
  const json want = checkpoint_tensors_json(specs);
  if (!tensors.is_array() || tensors.size() != want.size())
    fail("checkpoint", where, ": header tensors lists ", tensors.is_array() ? tensors.size() : 0,
         " entries, the model has ", want.size(), " tensors");
  for (size_t i = 0; i < want.size(); ++i)
    if (tensors[i] != want[i])
      fail("checkpoint", where, ": header tensors[", i, "] differs from ", want[i].dump(),
           " (the canonical tensor of the model config)");
}

// The fixed prefix: version, header_len, the JSON's offset; checks the version-3 header checksum.
struct Prefix {
  uint32_t version;
  uint64_t header_len, json_at;
};
Prefix read_prefix(const uint8_t* d, size_t n, const std::string& where) {
  if (n < 24 || std::memcmp(d, kCheckpointMagic, 8) != 0)
    fail("checkpoint", where, ": not an anelab checkpoint (magic 'ANELABCK' missing, ", n, " bytes)");
  Prefix p{};
  uint32_t reserved;
  std::memcpy(&p.version, d + 8, 4);
  std::memcpy(&reserved, d + 12, 4);
  std::memcpy(&p.header_len, d + 16, 8);
  if (p.version < 1 || p.version > kCheckpointVersion)
    fail("checkpoint", where, ": version ", p.version, " is not supported (this build reads 1..", kCheckpointVersion,
         ")");
  if (reserved != 0) fail("checkpoint", where, ": reserved word at offset 12 is ", reserved, ", expected 0");
  p.json_at = p.version >= 3 ? 32 : 24;
  if (p.header_len == 0 || p.header_len > kCheckpointMaxHeader || p.json_at + p.header_len > n)
    fail("checkpoint", where, ": header_len ", p.header_len, " is out of range for a ", n, "-byte file");
  if (p.version >= 3) {
    uint64_t want;
    std::memcpy(&want, d + 24, 8);
    if (fnv1a64(kFnvOffset, d + p.json_at, p.header_len) != want)
      fail("checkpoint", where, ": header checksum mismatch (the header was edited or is corrupt)");
  }
  return p;
}

}  // namespace

CheckpointView parse_checkpoint(const uint8_t* d, size_t n, const std::string& where, TensorsOf tensors_of,
                                bool verify_data) {
  const Prefix p = read_prefix(d, n, where);
  const json j = json::parse(d + p.json_at, d + p.json_at + p.header_len, nullptr, false);
  if (j.is_discarded()) fail("checkpoint", where, ": header is not valid JSON");
  const HeaderFields f(j, "", where);
  if (f.string("format") != "anelab-checkpoint") f.bad("format", f.at("format"), "is not anelab-checkpoint");
  if (f.integer("version", 1, kCheckpointVersion) != p.version)
    f.bad("version", f.at("version"), "differs from the file's version " + std::to_string(p.version));
  CheckpointView v;
  v.version = p.version;
  v.header.model = model_config_from_json(f.at("model"), where, "checkpoint", "model.", ConfigKeys::kCheckpoint);
  v.tensors = tensors_of(v.header.model, where);
  v.n_params = checked_numel(v.tensors, where);
  for (const auto& [key, want] : {std::pair{"n_params", v.n_params}, {"data_size", v.n_params * 12}}) {
    const json& got = f.at(key);
    if (!got.is_number_integer() ||
        (got.is_number_unsigned() ? got.get<uint64_t>() != uint64_t(want) : got.get<int64_t>() != want))
      f.bad(key, got, "differs from the " + std::to_string(want) + " the model config implies");
  }
  if (p.version >= 2) check_tensor_table(f.at("tensors"), v.tensors, where);
  read_training_fields(f, where, &v.header);
  const uint64_t off = (p.json_at + p.header_len + 63) / 64 * 64;
  const uint64_t bytes = uint64_t(v.n_params) * 12;
  if (off + bytes != n)
    fail("checkpoint", where, ": ", n, " bytes, but the header implies ", off + bytes, " (", v.n_params,
         " parameters x 3 fp32 arrays after a ", off, "-byte header): truncated or corrupt");
  const uint64_t sum = f.hex("checksum");
  if (verify_data && fnv1a64(kFnvOffset, d + off, bytes) != sum)
    fail("checkpoint", where, ": data checksum mismatch (corrupt file); use the run's other checkpoint or start over");
  v.weights = d + off;
  return v;
}

std::vector<uint8_t> encode_checkpoint_header(const CheckpointHeader& s, const std::vector<TensorSpec>& tensors,
                                              uint64_t data_checksum) {
  const int64_t n_params = checked_numel(tensors, "checkpoint header");
  const json h = {
      {"format", "anelab-checkpoint"},
      {"version", kCheckpointVersion},
      {"model", model_config_to_json(s.model)},
      {"n_params", n_params},
      {"tensors", checkpoint_tensors_json(tensors)},
      {"step", s.step},
      {"adam_t", s.adam_t},
      {"loss_scale",
       {{"dynamic", s.ls_dynamic},
        {"scale", s.ls_scale},
        {"interval", int64_t(s.ls_interval)},
        {"good_steps", s.ls_good_steps}}},
      {"data", {{"batching", s.batching}, {"state", hex64(s.data_state)}}},
      {"best_val_loss", s.best_val_loss ? json(*s.best_val_loss) : json(nullptr)},
      {"restarts", s.restarts},
      {"tokens", s.tokens},
      {"totals", {{"wall_s", s.wall_s}, {"compile_s", s.compile_s}, {"train_s", s.train_s}, {"compiles", s.compiles}}},
      {"config", s.config},
      {"data_size", n_params * 12},
      {"checksum", hex64(data_checksum)}};
  const std::string js = h.dump();
  const uint64_t hl = js.size(), hsum = fnv1a64(kFnvOffset, js.data(), js.size());
  std::vector<uint8_t> out(32);
  std::memcpy(out.data(), kCheckpointMagic, 8);
  std::memcpy(out.data() + 8, &kCheckpointVersion, 4);
  std::memcpy(out.data() + 16, &hl, 8);
  std::memcpy(out.data() + 24, &hsum, 8);
  out.insert(out.end(), js.begin(), js.end());
  out.resize((out.size() + 63) / 64 * 64, 0);
  return out;
}

json checkpoint_tensors_json(const std::vector<TensorSpec>& tensors) {
  json t = json::array();
  int64_t off = 0;
  for (const TensorSpec& s : tensors) {
    t.push_back({{"name", s.name}, {"shape", s.shape}, {"offset", off}});
    off += s.numel();
  }
  return t;
}

}  // namespace anelab::models
