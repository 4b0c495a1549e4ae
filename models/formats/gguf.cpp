// GGUF container: parser (bounds-checked, limits on counts/lengths) and writer.
#include "models/formats/gguf.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/platform.h"
#include "models/formats/byte_reader.h"

namespace anelab::models {
namespace {
constexpr uint64_t kMaxStr = 1ull << 24;

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    default:
      return 0;
  }
}

// Reads one numeric/bool scalar of type t as double (and its exact unsigned value in u).
double read_num(ByteReader& r, GgufType t, uint64_t* u, const char* f) {
  switch (t) {
    case GgufType::kU8:
      return static_cast<double>(*u = r.get<uint8_t>(f));
    case GgufType::kI8:
      return r.get<int8_t>(f);
    case GgufType::kU16:
      return static_cast<double>(*u = r.get<uint16_t>(f));
    case GgufType::kI16:
      return r.get<int16_t>(f);
    case GgufType::kU32:
      return static_cast<double>(*u = r.get<uint32_t>(f));
    case GgufType::kI32:
      return r.get<int32_t>(f);
    case GgufType::kF32:
      return r.get<float>(f);
    case GgufType::kBool: {
      const uint8_t b = r.get<uint8_t>(f);
      if (b > 1) fail("model", r.where(), ": bool value ", int(b), " at offset ", r.pos() - 1, " is not 0/1");
      return b;
    }
    case GgufType::kU64:
      return static_cast<double>(*u = r.get<uint64_t>(f));
    case GgufType::kI64:
      return static_cast<double>(r.get<int64_t>(f));
    case GgufType::kF64:
      return r.get<double>(f);
    default:
      fail("model", r.where(), ": value type ", uint32_t(t), " is not numeric");
  }
}

GgufValue read_value(ByteReader& r, GgufType t, const std::string& key, int depth) {
  GgufValue v;
  v.type = t;
  if (t == GgufType::kString) {
    v.str = r.str<uint64_t>("metadata string", kMaxStr);
  } else if (t == GgufType::kArray) {
    if (depth > 1) fail("model", r.where(), ": metadata ", key, " nests arrays too deeply");
    const uint32_t et = r.get<uint32_t>("array element type");
    if (et > 12) fail("model", r.where(), ": metadata ", key, " has array element type ", et, " (valid: 0-12)");
    v.elem_type = static_cast<GgufType>(et);
    const uint64_t n = r.get<uint64_t>("array length");
    const size_t es = v.elem_type == GgufType::kString ? 8 : std::max<size_t>(scalar_size(v.elem_type), 1);
    if (n > r.remaining() / es)
      fail("model", r.where(), ": metadata ", key, " array length ", n, " exceeds the bytes left (", r.remaining(),
           "); the file is truncated or corrupt");
    for (uint64_t i = 0; i < n; ++i) {
      if (v.elem_type == GgufType::kString)
        v.strs.push_back(r.str<uint64_t>("array string", kMaxStr));
      else if (v.elem_type == GgufType::kArray)
        read_value(r, GgufType::kArray, key, depth + 1);
      else
        v.nums.push_back(read_num(r, v.elem_type, &v.u, "array element"));
    }
  } else if (static_cast<uint32_t>(t) <= 12) {
    v.num = read_num(r, t, &v.u, "metadata value");
  } else {
    fail("model", r.where(), ": metadata ", key, " has value type ", uint32_t(t), " (valid: 0-12)");
  }
  return v;
}

// Bytes of a tensor of ggml type `type` with ne[0] = row and n elements; the error names the tensor.
int64_t ggml_nbytes(uint32_t type, int64_t row, int64_t n, const std::string& name, const std::string& w) {
  const std::optional<DType> d = dtype_of_ggml(type);
  if (!d) {
    std::string names = "F32, F16, BF16";
    for (const quant::TypeTraits& r : quant::kTypes) {
      names += ", ";
      for (const char* c = r.name; *c; ++c) names += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
    }
    fail("model", w, ": tensor ", name, " has ggml type ", type, ", which is not supported (", names,
         "); re-quantise the model to one of these");
  }
  if (row % dtype_block(*d))
    fail("model", w, ": tensor ", name, " row length ", row, " is not a multiple of ", dtype_block(*d), " for ",
         dtype_name(*d));
  return dtype_nbytes(*d, n);
}
}  // namespace

std::optional<DType> dtype_of_ggml(uint32_t ggml_type) {
  if (ggml_type == kGgmlF32) return DType::kF32;
  if (ggml_type == kGgmlF16) return DType::kF16;
  if (ggml_type == kGgmlBF16) return DType::kBF16;
  if (const std::optional<quant::BlockType> b = quant::find_ggml_type(ggml_type)) return dtype_of(*b);
  return std::nullopt;
}

uint32_t ggml_type_of(DType t) {
  if (const std::optional<quant::BlockType> b = block_type_of(t)) return quant::traits(*b).ggml_type;
  return t == DType::kF32 ? kGgmlF32 : t == DType::kF16 ? kGgmlF16 : kGgmlBF16;
}

bool GgufValue::is_int() const {
  return type != GgufType::kF32 && type != GgufType::kF64 && type != GgufType::kString && type != GgufType::kArray;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv.find(key);
  return it == kv.end() ? nullptr : &it->second;
}
int64_t GgufFile::get_int(const std::string& key, const std::string& w) const {
  const GgufValue* v = find(key);
  if (!v) fail("model", w, ": GGUF metadata ", key, " is missing");
  if (!v->is_int() || v->type == GgufType::kBool) fail("model", w, ": GGUF metadata ", key, " is not an integer");
  if (v->num > 9.0e15 || v->num < -9.0e15) fail("model", w, ": GGUF metadata ", key, " = ", v->num, " is absurd");
  return static_cast<int64_t>(v->num);
}
int64_t GgufFile::get_int(const std::string& key, int64_t def) const { return find(key) ? get_int(key, "") : def; }
double GgufFile::get_num(const std::string& key, double def) const {
  const GgufValue* v = find(key);
  if (!v) return def;
  if (v->type == GgufType::kString || v->type == GgufType::kArray)
    fail("model", "GGUF metadata ", key, " is not a number");
  return v->num;
}
std::string GgufFile::get_str(const std::string& key, const std::string& w) const {
  const GgufValue* v = find(key);
  if (!v || v->type != GgufType::kString) fail("model", w, ": GGUF metadata ", key, " is missing or not a string");
  return v->str;
}

bool looks_like_gguf(const uint8_t* data, size_t size) { return size >= 4 && std::memcmp(data, "GGUF", 4) == 0; }

GgufFile parse_gguf(const uint8_t* data, size_t size, std::shared_ptr<const void> owner, const std::string& w) {
  ByteReader r(data, size, w);
  if (!looks_like_gguf(data, size)) fail("model", w, ": not a GGUF file (magic \"GGUF\" missing)");
  r.take(4, "magic");
  GgufFile g;
  g.owner = owner;
  g.version = r.get<uint32_t>("version");
  if (g.version != 2 && g.version != 3)
    fail("model", w, ": GGUF version ", g.version, " is not supported (2 or 3); convert with a current llama.cpp");
  const uint64_t n_tensors = r.get<uint64_t>("tensor_count");
  const uint64_t n_kv = r.get<uint64_t>("metadata_kv_count");
  if (n_tensors > r.remaining() / 24 || n_kv > r.remaining() / 12)
    fail("model", w, ": tensor_count ", n_tensors, " / kv_count ", n_kv, " cannot fit in the file; corrupt header");
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.str<uint64_t>("metadata key", 1 << 16);
    const uint32_t t = r.get<uint32_t>("metadata value type");
    g.kv[key] = read_value(r, static_cast<GgufType>(t), key, 0);
  }
  if (const GgufValue* a = g.find("general.alignment")) {
    if (!a->is_int() || a->u == 0 || a->u > 4096 || (a->u & (a->u - 1)))
      fail("model", w, ": general.alignment must be a power of two <= 4096");
    g.alignment = a->u;
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = r.str<uint64_t>("tensor name", 1 << 12);
    const uint32_t nd = r.get<uint32_t>("tensor n_dims");
    if (nd == 0 || nd > 4) fail("model", w, ": tensor ", t.name, " has ", nd, " dimensions (1-4 allowed)");
    int64_t n = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t e = r.get<uint64_t>("tensor dim");
      if (e == 0 || e > (1ull << 40) || static_cast<uint64_t>(n) > (1ull << 40) / e)
        fail("model", w, ": tensor ", t.name, " has an absurd dimension ", e);
      t.ne.push_back(static_cast<int64_t>(e));
      n *= static_cast<int64_t>(e);
    }
    t.ggml_type = r.get<uint32_t>("tensor type");
    t.offset = r.get<uint64_t>("tensor offset");
    if (t.offset % g.alignment) fail("model", w, ": tensor ", t.name, " offset ", t.offset, " is not aligned");
    t.nbytes = ggml_nbytes(t.ggml_type, t.ne[0], n, t.name, w);
    g.tensors.push_back(std::move(t));
  }
  const uint64_t data_start = round_up(static_cast<int64_t>(r.pos()), static_cast<int64_t>(g.alignment));
  for (auto& t : g.tensors) {
    if (data_start > size || t.offset > size - data_start ||
        static_cast<uint64_t>(t.nbytes) > size - data_start - t.offset)
      fail("model", w, ": tensor ", t.name, " data (offset ", t.offset, ", ", t.nbytes,
           " bytes) runs past the end of the file (", size, " bytes); the file is truncated");
    t.data = data + data_start + t.offset;
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [offset, end) of each tensor's bytes
  for (const auto& t : g.tensors) ranges.emplace_back(t.offset, t.offset + static_cast<uint64_t>(t.nbytes));
  if (const auto clash = first_overlap(ranges))
    fail("model", w, ": tensor ", g.tensors[clash->second].name, " (bytes ", ranges[clash->second].first, "-",
         ranges[clash->second].second, " of the data section) overlaps tensor ", g.tensors[clash->first].name,
         " (bytes ", ranges[clash->first].first, "-", ranges[clash->first].second,
         "); the file is corrupt or was crafted");
  return g;
}

GgufFile read_gguf_file(const std::string& path, FileAccess access) {
  auto mf = std::make_shared<MappedFile>(path, access);
  return parse_gguf(mf->data(), mf->size(), mf, path);
}

// ---- writer ----

namespace {
template <typename T>
void put(std::vector<uint8_t>& o, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  o.insert(o.end(), p, p + sizeof(T));
}
void put_gguf_str(std::vector<uint8_t>& o, const std::string& s) {
  put<uint64_t>(o, s.size());
  o.insert(o.end(), s.begin(), s.end());
}
}  // namespace

void GgufWriter::add_u32(const std::string& k, uint32_t v) {
  put_gguf_str(kv_, k);
  put<uint32_t>(kv_, 4);
  put(kv_, v);
  ++n_kv_;
}
void GgufWriter::add_i32(const std::string& k, int32_t v) {
  put_gguf_str(kv_, k);
  put<uint32_t>(kv_, 5);
  put(kv_, v);
  ++n_kv_;
}
void GgufWriter::add_f32(const std::string& k, float v) {
  put_gguf_str(kv_, k);
  put<uint32_t>(kv_, 6);
  put(kv_, v);
  ++n_kv_;
}
void GgufWriter::add_bool(const std::string& k, bool v) {
  put_gguf_str(kv_, k);
  put<uint32_t>(kv_, 7);
  put<uint8_t>(kv_, v);
  ++n_kv_;
}
void GgufWriter::add_str(const std::string& k, const std::string& v) {
  put_gguf_str(kv_, k);
  put<uint32_t>(kv_, 8);
  put_gguf_str(kv_, v);
  ++n_kv_;
}
void GgufWriter::add_str_array(const std::string& k, const std::vector<std::string>& v) {
  put_gguf_str(kv_, k);
  put<uint32_t>(kv_, 9);
  put<uint32_t>(kv_, 8);
  put<uint64_t>(kv_, v.size());
  for (const auto& s : v) put_gguf_str(kv_, s);
  ++n_kv_;
}
void GgufWriter::add_f32_array(const std::string& k, const std::vector<float>& v) {
  put_gguf_str(kv_, k);
  put<uint32_t>(kv_, 9);
  put<uint32_t>(kv_, 6);
  put<uint64_t>(kv_, v.size());
  for (float f : v) put(kv_, f);
  ++n_kv_;
}
void GgufWriter::add_i32_array(const std::string& k, const std::vector<int32_t>& v) {
  put_gguf_str(kv_, k);
  put<uint32_t>(kv_, 9);
  put<uint32_t>(kv_, 5);
  put<uint64_t>(kv_, v.size());
  for (int32_t x : v) put(kv_, x);
  ++n_kv_;
}
void GgufWriter::add_tensor(const std::string& name, uint32_t type, std::vector<int64_t> ne, std::vector<uint8_t> b) {
  T t{name, type, std::move(ne), std::move(b), nullptr, 0};
  t.data = t.owned.data();
  t.nbytes = static_cast<int64_t>(t.owned.size());
  tensors_.push_back(std::move(t));
}
void GgufWriter::add_tensor_view(const std::string& name, uint32_t type, std::vector<int64_t> ne, const uint8_t* data,
                                 int64_t nbytes) {
  tensors_.push_back({name, type, std::move(ne), {}, data, nbytes});
}

// Everything before the tensor data (padded to the data start); offs = each tensor's data offset.
std::vector<uint8_t> GgufWriter::header(uint32_t alignment, std::vector<uint64_t>& offs, uint64_t& data_bytes) const {
  std::vector<uint8_t> o;
  o.insert(o.end(), {'G', 'G', 'U', 'F'});
  put<uint32_t>(o, 3);
  put<uint64_t>(o, tensors_.size());
  put<uint64_t>(o, n_kv_ + (alignment != 32 ? 1 : 0));
  o.insert(o.end(), kv_.begin(), kv_.end());
  if (alignment != 32) {
    put_gguf_str(o, "general.alignment");
    put<uint32_t>(o, 4);
    put<uint32_t>(o, alignment);
  }
  uint64_t off = 0;
  offs.clear();
  for (const auto& t : tensors_) {
    put_gguf_str(o, t.name);
    put<uint32_t>(o, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(o, static_cast<uint64_t>(d));
    put<uint32_t>(o, t.type);
    put<uint64_t>(o, off);
    offs.push_back(off);
    off = round_up(static_cast<int64_t>(off + t.nbytes), alignment);
  }
  o.resize(round_up(static_cast<int64_t>(o.size()), alignment), 0);
  data_bytes = off;
  return o;
}

std::vector<uint8_t> GgufWriter::build(uint32_t alignment) const {
  std::vector<uint64_t> offs;
  uint64_t data_bytes = 0;
  std::vector<uint8_t> o = header(alignment, offs, data_bytes);
  const size_t data_start = o.size();
  o.resize(data_start + data_bytes, 0);
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].nbytes) std::memcpy(o.data() + data_start + offs[i], tensors_[i].data, tensors_[i].nbytes);
  return o;
}

int64_t GgufWriter::write(const std::string& path, uint32_t alignment) const {
  std::vector<uint64_t> offs;
  uint64_t data_bytes = 0;
  const std::vector<uint8_t> head = header(alignment, offs, data_bytes);
  const std::string tmp = path + ".tmp." + std::to_string(platform::process_id());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("model", "cannot create ", tmp, ": ", std::strerror(errno));
  bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size();
  static const uint8_t zeros[256] = {};
  uint64_t pos = 0;
  for (size_t i = 0; ok && i < tensors_.size(); ++i) {
    for (; ok && pos < offs[i]; pos += std::min<uint64_t>(offs[i] - pos, sizeof zeros))
      ok = std::fwrite(zeros, 1, std::min<uint64_t>(offs[i] - pos, sizeof zeros), f) > 0;
    const auto n = static_cast<size_t>(tensors_[i].nbytes);
    ok = ok && (n == 0 || std::fwrite(tensors_[i].data, 1, n, f) == n);
    pos += n;
  }
  for (; ok && pos < data_bytes; pos += std::min<uint64_t>(data_bytes - pos, sizeof zeros))
    ok = std::fwrite(zeros, 1, std::min<uint64_t>(data_bytes - pos, sizeof zeros), f) > 0;
  ok = ok && std::fflush(f) == 0;
  const int err = errno;
  std::fclose(f);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("model", "cannot write ", path, ": ", std::strerror(ok ? errno : err), " (disk full? directory writable?)");
  }
  return static_cast<int64_t>(head.size() + data_bytes);
}

}  // namespace anelab::models
