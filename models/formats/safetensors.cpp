#include "models/formats/safetensors.h"

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/formats/byte_reader.h"

namespace anelab::models {
namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;
constexpr uint64_t kMaxStHeader = 100ull << 20;

DType st_dtype(const std::string& s, const std::string& name, const std::string& w) {
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  fail("model", w, ": tensor ", name, " has dtype ", s, "; only F32, F16 and BF16 safetensors are supported");
}

json parse_json_text(const char* b, const char* e, const std::string& what) {
  try {
    return json::parse(b, e);
  } catch (const json::exception& ex) {
    fail("model", what, ": invalid JSON (", ex.what(), ")");
  }
}
}  // namespace

bool looks_like_safetensors(const uint8_t* data, size_t size) {
  if (size < 10) return false;
  uint64_t n;
  std::memcpy(&n, data, 8);
  return n >= 2 && n <= size - 8 && data[8] == '{';
}

StTensorMap parse_safetensors(const uint8_t* data, size_t size, std::shared_ptr<const void> owner,
                              const std::string& w) {
  ByteReader r(data, size, w);
  const uint64_t n = r.get<uint64_t>("safetensors header length");
  if (n > kMaxStHeader || n > r.remaining())
    fail("model", w, ": safetensors header length ", n, " exceeds the file (", r.remaining(),
         " bytes left) or the 100 MiB limit; the file is truncated or not safetensors");
  const char* hp = reinterpret_cast<const char*>(r.take(n, "safetensors header"));
  const json h = parse_json_text(hp, hp + n, w + " safetensors header");
  if (!h.is_object()) fail("model", w, ": safetensors header is not a JSON object");
  const uint8_t* buf = data + 8 + n;
  const uint64_t buf_size = size - 8 - n;
  StTensorMap out;
  std::vector<std::string> names;                     // tensors in header order
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // their [begin, end) in the data buffer
  for (const auto& [name, e] : h.items()) {
    if (name == "__metadata__") continue;
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2)
      fail("model", w, ": safetensors entry ", name, " needs dtype (string), shape (list), data_offsets [begin, end]");
    StTensor t;
    t.dtype = st_dtype(e["dtype"].get<std::string>(), name, w);
    int64_t numel = 1;
    for (const json& d : e["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 40) ||
          (d.get<int64_t>() && numel > (int64_t{1} << 40) / d.get<int64_t>()))
        fail("model", w, ": tensor ", name, " has an invalid shape ", e["shape"].dump());
      t.shape.push_back(d.get<int64_t>());
      numel *= t.shape.back();
    }
    const json& o = e["data_offsets"];
    if (!o[0].is_number_unsigned() || !o[1].is_number_unsigned())
      fail("model", w, ": tensor ", name, " data_offsets must be non-negative integers");
    const uint64_t b = o[0].get<uint64_t>(), end = o[1].get<uint64_t>();
    if (b > end || end > buf_size)
      fail("model", w, ": tensor ", name, " data_offsets [", b, ", ", end, "] lie outside the data buffer (", buf_size,
           " bytes); the file is truncated or corrupt");
    if (static_cast<int64_t>(end - b) != dtype_nbytes(t.dtype, numel))
      fail("model", w, ": tensor ", name, " has ", end - b, " bytes but shape ", e["shape"].dump(), " of ",
           e["dtype"].get<std::string>(), " needs ", dtype_nbytes(t.dtype, numel));
    t.data = buf + b;
    t.nbytes = static_cast<int64_t>(end - b);
    t.owner = owner;
    names.push_back(name);
    ranges.emplace_back(b, end);
    out.emplace(name, std::move(t));
  }
  if (const auto clash = first_overlap(ranges))
    fail("model", w, ": tensor ", names[clash->second], " (data_offsets [", ranges[clash->second].first, ", ",
         ranges[clash->second].second, "]) overlaps tensor ", names[clash->first], " ([", ranges[clash->first].first,
         ", ", ranges[clash->first].second, "]); the file is corrupt or was crafted");
  return out;
}

std::vector<uint8_t> build_safetensors(const std::vector<StWrite>& tensors) {
  json h = json::object();
  uint64_t off = 0;
  for (const auto& t : tensors) {
    h[t.name] = json{{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string hs = h.dump();
  while ((hs.size() + 8) % 8) hs += ' ';
  std::vector<uint8_t> out(8);
  const uint64_t n = hs.size();
  std::memcpy(out.data(), &n, 8);
  out.insert(out.end(), hs.begin(), hs.end());
  for (const auto& t : tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

std::map<std::string, std::string> parse_safetensors_index(std::string_view text, const std::string& where) {
  const json j = parse_json_text(text.data(), text.data() + text.size(), where);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail("model", where, ": no weight_map object; not a safetensors index");
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) fail("model", where, ": weight_map entry ", name, " is not a file name");
    const std::string f = file.get<std::string>();
    if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
      fail("model", where, ": shard name ", f, " must be a plain file name in the same directory");
    weight_map[name] = f;
  }
  return weight_map;
}

}  // namespace anelab::models
