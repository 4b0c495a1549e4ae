#include "models/formats/anelab_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>
#include <thread>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/platform.h"
#include "models/formats/byte_reader.h"
#include "models/formats/checkpoint_header.h"
#include "models/formats/model_config_json.h"

namespace anelab::models {
namespace {
using json = nlohmann::json;
constexpr uint64_t kMaxHeader = 64ull << 20;
constexpr int64_t kSumBlock = 1 << 20;  // the data checksum's block (anelab_file.h)

// The version-5 data checksum of n bytes (anelab_file.h): blocks hashed on up to 8 threads, so that checking a
// multi-GiB model costs a fraction of a second more than mapping it, not seconds of one core.
uint64_t data_checksum(const uint8_t* p, int64_t n) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<uint64_t> digest(static_cast<size_t>(blocks));
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t b; (b = next.fetch_add(1)) < blocks;)
      digest[size_t(b)] = fnv1a64(kFnvOffset, p + b * kSumBlock, size_t(std::min(kSumBlock, n - b * kSumBlock)));
  };
  const int64_t helpers = std::min<int64_t>({blocks - 1, 7, std::max(1u, std::thread::hardware_concurrency()) - 1});
  std::vector<std::thread> threads;
  try {
    for (int64_t i = 0; i < helpers; ++i) threads.emplace_back(work);
  } catch (const std::system_error&) {  // no more threads (a process limit): this one does the rest
  }
  work();
  for (std::thread& t : threads) t.join();
  uint64_t sum = kFnvOffset;
  for (const uint64_t d : digest) sum = fnv1a64(sum, &d, 8);
  return sum;
}

const json& field(const json& j, const char* key, const std::string& where, const char* ctx) {
  if (!j.is_object() || !j.contains(key))
    fail("model", where, ": header field ", ctx, key, " is missing; the file was not written by anelab or is corrupt");
  return j.at(key);
}
int64_t jint(const json& j, const char* key, const std::string& where, const char* ctx = "") {
  const json& v = field(j, key, where, ctx);
  if (!v.is_number_integer()) fail("model", where, ": header field ", ctx, key, " must be an integer, got ", v.dump());
  return v.get<int64_t>();
}
std::string jstr(const json& j, const char* key, const std::string& where, const char* ctx = "") {
  const json& v = field(j, key, where, ctx);
  if (!v.is_string()) fail("model", where, ": header field ", ctx, key, " must be a string, got ", v.dump());
  return v.get<std::string>();
}

// ---- vocab blob ----

void put_u32(std::vector<uint8_t>& o, uint32_t v) {
  o.insert(o.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 4);
}
void put_str(std::vector<uint8_t>& o, const std::string& s) {
  put_u32(o, static_cast<uint32_t>(s.size()));
  o.insert(o.end(), s.begin(), s.end());
}
}  // namespace

std::vector<uint8_t> serialize_vocab(const tok::VocabData& v) {
  std::vector<uint8_t> o;
  const char magic[] = "ANETOK01";
  o.insert(o.end(), magic, magic + 8);
  put_u32(o, v.kind == tok::TokenizerKind::kSentencePiece ? 0 : 1);
  put_str(o, v.pre);
  put_str(o, v.pre_regex);
  o.push_back(static_cast<uint8_t>((v.nfc_normalize ? 1 : 0) | (v.add_bos ? 2 : 0) | (v.add_space_prefix ? 4 : 0)));
  for (int32_t id : {v.bos_id, v.eos_id, v.unk_id, v.pad_id}) put_u32(o, static_cast<uint32_t>(id));
  put_u32(o, static_cast<uint32_t>(v.tokens.size()));
  for (const auto& t : v.tokens) put_str(o, t);
  put_u32(o, static_cast<uint32_t>(v.scores.size()));
  for (float s : v.scores) put_u32(o, std::bit_cast<uint32_t>(s));
  put_u32(o, static_cast<uint32_t>(v.types.size()));
  for (auto t : v.types) put_u32(o, static_cast<uint32_t>(t));
  put_u32(o, static_cast<uint32_t>(v.merges.size()));
  for (const auto& m : v.merges) put_str(o, m);
  return o;
}

tok::VocabData deserialize_vocab(const uint8_t* data, size_t size, const std::string& where) {
  ByteReader r(data, size, where + " tokenizer section");
  const uint8_t* magic = r.take(8, "tokenizer magic");
  if (std::memcmp(magic, "ANETOK01", 8) != 0)
    fail("model", where, ": embedded tokenizer has a bad magic (expected ANETOK01); re-convert the model");
  tok::VocabData v;
  const uint32_t kind = r.get<uint32_t>("tokenizer kind");
  if (kind > 1) fail("model", where, ": tokenizer kind ", kind, " is not 0 (sentencepiece) or 1 (byte_bpe)");
  v.kind = kind == 0 ? tok::TokenizerKind::kSentencePiece : tok::TokenizerKind::kByteBpe;
  v.pre = r.str<uint32_t>("tokenizer pre");
  v.pre_regex = r.str<uint32_t>("tokenizer pre_regex");
  const uint8_t flags = r.get<uint8_t>("tokenizer flags");
  v.nfc_normalize = flags & 1;
  v.add_bos = flags & 2;
  v.add_space_prefix = flags & 4;
  v.bos_id = r.get<int32_t>("bos_id");
  v.eos_id = r.get<int32_t>("eos_id");
  v.unk_id = r.get<int32_t>("unk_id");
  v.pad_id = r.get<int32_t>("pad_id");
  // Each count is bounded by the bytes left (every element takes at least 4 bytes).
  auto count = [&](const char* what) {
    const uint32_t n = r.get<uint32_t>(what);
    if (n > r.remaining() / 4) fail("model", where, ": tokenizer ", what, " ", n, " exceeds the section size");
    return n;
  };
  const uint32_t nt = count("token count");
  v.tokens.reserve(nt);
  for (uint32_t i = 0; i < nt; ++i) v.tokens.push_back(r.str<uint32_t>("token text", 1 << 16));
  const uint32_t ns = count("score count");
  for (uint32_t i = 0; i < ns; ++i) v.scores.push_back(r.get<float>("score"));
  const uint32_t ny = count("token type count");
  for (uint32_t i = 0; i < ny; ++i) v.types.push_back(static_cast<tok::TokenType>(r.get<int32_t>("token type")));
  const uint32_t nm = count("merge count");
  v.merges.reserve(nm);
  for (uint32_t i = 0; i < nm; ++i) v.merges.push_back(r.str<uint32_t>("merge", 1 << 16));
  if ((ns && ns != nt) || (ny && ny != nt))
    fail("model", where, ": tokenizer has ", nt, " tokens but ", ns, " scores and ", ny, " types");
  return v;
}

bool looks_like_anelab(const uint8_t* data, size_t size) {
  return size >= 8 && std::memcmp(data, kAnelabMagic, 8) == 0;
}

namespace {

// One entry of the palettes section (anelab_file.h) into m.palettes, checked field by field and against the values
// of its tensor; every error is one line naming the tensor.
template <typename Blob>
void read_palette(const json& e, Model& m, const uint8_t* data, const Blob& blob, const std::string& w) {
  const std::string name = jstr(e, "name", w, "palettes[].");
  const std::string ctx = "palette of tensor " + name + ": ";
  const Tensor* t = m.find(name);
  if (!t || t->shape.size() != 2 || (t->dtype != DType::kF16 && t->dtype != DType::kF32))
    fail("model", w, ": ", ctx, "no such 2-D fp16 / fp32 tensor in the file");
  if (m.palettes.count(name)) fail("model", w, ": ", ctx, "listed twice");
  quant::Palette p;
  p.bits = static_cast<int>(jint(e, "bits", w, ctx.c_str()));
  p.group = jint(e, "group", w, ctx.c_str());
  p.rows = t->rows(), p.cols = t->cols();
  if ((p.bits != 4 && p.bits != 6) || p.group <= 0 || p.rows % p.group != 0)
    fail("model", w, ": ", ctx, "bits ", p.bits, " / group ", p.group, " (4 or 6 bits, a group dividing ", p.rows,
         " rows expected)");
  auto [ioff, inb] = blob(field(e, "indices", w, ctx.c_str()), (ctx + "indices ").c_str());
  auto [loff, lnb] = blob(field(e, "lut", w, ctx.c_str()), (ctx + "lut ").c_str());
  if (inb != p.rows * p.cols || lnb != p.tables() * p.entries() * 2)
    fail("model", w, ": ", ctx, "indices ", inb, " bytes / lut ", lnb, " bytes, expected ", p.rows * p.cols, " / ",
         p.tables() * p.entries() * 2, " (the section is short or corrupt)");
  p.indices.assign(data + ioff, data + ioff + inb);
  p.lut.resize(static_cast<size_t>(lnb / 2));
  std::memcpy(p.lut.data(), data + loff, static_cast<size_t>(lnb));
  try {
    quant::check_palette(p, name);
  } catch (const Error& err) {
    fail("model", w, ": ", err.what());
  }
  const std::vector<float> want = quant::palette_values(p), have = t->to_f32();
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&want[i], &have[i], sizeof(float)) != 0)
      fail("model", w, ": ", ctx, "element ", i, " of the tensor is ", have[i], " but its palette gives ", want[i],
           " (corrupt palette or tensor data)");
  m.palettes[name] = std::make_shared<const quant::Palette>(std::move(p));
}

}  // namespace

Model parse_anelab(const uint8_t* data, size_t size, std::shared_ptr<const void> owner, const std::string& w) {
  ByteReader r(data, size, w);
  if (!looks_like_anelab(data, size))
    fail("model", w, ": not an anelab model file (magic ANELABMF missing); use `anelab info` to identify it");
  r.take(8, "magic");
  const uint32_t version = r.get<uint32_t>("format version");
  if (version < 1 || version > kAnelabPaletteVersion)
    fail("model", w, ": anelab format version ", version, " is not supported (this build reads versions 1 to ",
         kAnelabPaletteVersion, "); re-convert the model with this anelab");
  r.get<uint32_t>("reserved");
  const uint64_t hlen = r.get<uint64_t>("header_len");
  uint64_t header_sum = 0, data_sum = 0;
  if (version >= 5) {
    header_sum = r.get<uint64_t>("header checksum");
    data_sum = r.get<uint64_t>("data checksum");
  }
  const int64_t json_at = static_cast<int64_t>(r.pos());
  if (hlen > kMaxHeader || hlen > r.remaining())
    fail("model", w, ": header_len ", hlen, " exceeds the file (", r.remaining(), " bytes left) or 64 MiB limit");
  const char* hp = reinterpret_cast<const char*>(r.take(hlen, "JSON header"));
  if (version >= 5 && fnv1a64(kFnvOffset, hp, hlen) != header_sum)
    fail("model", w, ": header checksum mismatch (the header was edited or is corrupt); re-convert the model");
  json h;
  try {
    h = json::parse(hp, hp + hlen);
  } catch (const json::exception& e) {
    fail("model", w, ": JSON header does not parse (", e.what(), "); the file is corrupt");
  }
  if (jstr(h, "format", w) != "anelab-model") fail("model", w, ": header field format is not \"anelab-model\"");
  if (jint(h, "version", w) != version) fail("model", w, ": header field version does not match the binary version");
  const int64_t data_off = round_up(json_at + static_cast<int64_t>(hlen), kAnelabAlign);
  const int64_t data_size = jint(h, "data_size", w);
  if (data_size < 0 || data_off > static_cast<int64_t>(size) || data_size != static_cast<int64_t>(size) - data_off)
    fail("model", w, ": file is ", size, " bytes but the header promises ", data_off, " + data_size ", data_size,
         "; the file is truncated or has trailing bytes — re-convert it");
  if (version >= 5 && data_checksum(data + data_off, data_size) != data_sum)
    fail("model", w, ": data checksum mismatch (the tensor data is corrupt); re-convert or download the model again");
  Model m;
  m.source_format = "anelab";
  m.source_path = w;
  m.config = model_config_from_json(field(h, "config", w, ""), w, "model", "config.");
  auto blob = [&](const json& e, const char* ctx) {
    const int64_t off = jint(e, "offset", w, ctx), nb = jint(e, "nbytes", w, ctx);
    if (off < 0 || nb < 0 || off % kAnelabAlign || off > data_size || nb > data_size - off)
      fail("model", w, ": ", ctx, "offset ", off, " / nbytes ", nb, " lies outside the data section (", data_size,
           " bytes) or is not 64-byte aligned");
    return std::pair<int64_t, int64_t>(off, nb);
  };
  if (h.contains("tokenizer")) {
    const json& t = h["tokenizer"];
    m.tokenizer_path = jstr(t, "path", w, "tokenizer.");
    if (t.contains("embedded")) {
      auto [off, nb] = blob(t["embedded"], "tokenizer.embedded.");
      m.vocab = deserialize_vocab(data + data_off + off, static_cast<size_t>(nb), w);
    }
    if (t.contains("chat_template")) m.chat_template = jstr(t, "chat_template", w, "tokenizer.");
  }
  const json& ts = field(h, "tensors", w, "");
  if (!ts.is_array()) fail("model", w, ": header field tensors must be an array");
  for (const json& e : ts) {
    const std::string name = jstr(e, "name", w, "tensors[].");
    const std::string ctx = "tensor " + name + ": ";
    const DType dt = parse_dtype(jstr(e, "dtype", w, ctx.c_str()));
    if (version < dtype_min_version(dt))
      fail("model", w, ": ", ctx, "dtype ", dtype_name(dt), " needs format version ", dtype_min_version(dt),
           " (the file says ", version, ")");
    const json& sh = field(e, "shape", w, ctx.c_str());
    if (!sh.is_array() || sh.empty() || sh.size() > 4) fail("model", w, ": ", ctx, "shape must be a list of 1-4 dims");
    std::vector<int64_t> shape;
    for (const json& d : sh) {
      if (!d.is_number_integer()) fail("model", w, ": ", ctx, "shape entries must be integers");
      shape.push_back(d.get<int64_t>());
    }
    checked_numel({{name, shape}}, w);
    auto [off, nb] = blob(e, ctx.c_str());
    try {
      m.add_view(name, dt, shape, data + data_off + off, nb, owner);
    } catch (const Error& err) {
      fail("model", w, ": ", err.what());
    }
  }
  if (h.contains("palettes")) {
    if (version < kAnelabPaletteVersion)
      fail("model", w, ": header field palettes needs format version ", kAnelabPaletteVersion, " (the file says ",
           version, ")");
    const json& ps = h["palettes"];
    if (!ps.is_array()) fail("model", w, ": header field palettes must be an array");
    for (const json& e : ps) read_palette(e, m, data + data_off, blob, w);
  }
  return m;
}

Model read_anelab_file(const std::string& path, FileAccess access) {
  auto mf = std::make_shared<MappedFile>(path, access);
  return parse_anelab(mf->data(), mf->size(), mf, path);
}

int fuzz_read_anelab(const uint8_t* data, size_t size) {
  try {
    parse_anelab(data, size, nullptr, "<fuzz>");
  } catch (const Error&) {
  }
  return 0;
}

// ---- writer ----

namespace {
struct OutFile {
  std::string tmp, path;
  FILE* f = nullptr;
  int64_t pos = 0;
  int64_t hash_from = -1;  // >= 0: bytes from this offset on go into the data checksum (the data section)
  uint64_t sum = kFnvOffset, block_sum = kFnvOffset;  // data checksum so far; digest of the current block
  int64_t block_fill = 0;                             // bytes in the current block
  void hash(const uint8_t* p, int64_t n) {
    while (n > 0) {
      const int64_t k = std::min(n, kSumBlock - block_fill);
      block_sum = fnv1a64(block_sum, p, size_t(k));
      p += k, n -= k, block_fill += k;
      if (block_fill == kSumBlock) end_block();
    }
  }
  void end_block() {
    if (block_fill == 0) return;
    sum = fnv1a64(sum, &block_sum, 8);
    block_sum = kFnvOffset, block_fill = 0;
  }
  ~OutFile() {
    if (f) {
      std::fclose(f);
      std::remove(tmp.c_str());
    }
  }
  void write(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f) != n) fail("model", "cannot write ", tmp, ": ", std::strerror(errno));
    if (hash_from >= 0 && pos >= hash_from) hash(static_cast<const uint8_t*>(p), static_cast<int64_t>(n));
    pos += static_cast<int64_t>(n);
  }
  void pad_to(int64_t target) {
    static const uint8_t zeros[kAnelabAlign] = {};
    while (pos < target) write(zeros, static_cast<size_t>(std::min<int64_t>(target - pos, kAnelabAlign)));
  }
  // Writes 8 bytes at `at` (before the current position), then returns to the end.
  void patch_u64(int64_t at, uint64_t v) {
    if (std::fseek(f, static_cast<long>(at), SEEK_SET) != 0 || std::fwrite(&v, 1, 8, f) != 8 ||
        std::fseek(f, 0, SEEK_END) != 0)
      fail("model", "cannot write ", tmp, ": ", std::strerror(errno));
  }
  void commit() {
    if (std::fflush(f) != 0 || ::fsync(fileno(f)) != 0)
      fail("model", "cannot flush ", tmp, ": ", std::strerror(errno), " (disk full?)");
    std::fclose(f);
    f = nullptr;
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      const int e = errno;
      std::remove(tmp.c_str());
      fail("model", "cannot rename ", tmp, " to ", path, ": ", std::strerror(e));
    }
  }
};

void write_tensor_data(OutFile& out, const TensorWriteSpec& t, int64_t n, int64_t& done, int64_t total,
                       const ProgressFn& progress) {
  const int64_t nbytes = dtype_nbytes(t.dtype, n);
  if (t.raw) {
    constexpr int64_t kStep = 16 << 20;
    for (int64_t off = 0; off < nbytes; off += kStep) {
      const int64_t k = std::min(kStep, nbytes - off);
      out.write(t.raw + off, static_cast<size_t>(k));
      done += k;
      if (progress) progress(done, total);
    }
    return;
  }
  if (!t.fill) fail("model", "tensor ", t.name, " has neither raw bytes nor a fill function");
  constexpr int64_t kChunk = 1 << 20;  // elements; a multiple of the q8_0 block
  std::vector<float> buf(static_cast<size_t>(std::min(kChunk, n)));
  std::vector<uint8_t> conv(static_cast<size_t>(dtype_nbytes(t.dtype, static_cast<int64_t>(buf.size()))));
  for (int64_t b = 0; b < n; b += kChunk) {
    const int64_t k = std::min(kChunk, n - b);
    t.fill(b, k, buf.data());
    f32_to_dtype(buf.data(), t.dtype, conv.data(), k);
    const int64_t kb = dtype_nbytes(t.dtype, k);
    out.write(conv.data(), static_cast<size_t>(kb));
    done += kb;
    if (progress) progress(done, total);
  }
}
}  // namespace

uint32_t dtype_min_version(DType t) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ4_K:
    case DType::kQ6_K:
      return 3;
    case DType::kQ5_1:
    case DType::kQ5_K:
      return 4;
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
      return 1;
  }
  fail("model", "dtype id ", int(t), " is not a DType");
}

int64_t write_anelab_file(const std::string& path, const AnelabWriteInfo& info,
                          const std::vector<TensorWriteSpec>& tensors, const ProgressFn& progress) {
  validate_config_fields(info.config, path);
  const bool palettes = info.palettes && !info.palettes->empty();
  const uint32_t version = palettes ? kAnelabPaletteVersion : kAnelabVersion;  // 5: the checksums, whatever the dtypes
  json h{{"format", "anelab-model"},
         {"version", version},
         {"config", model_config_to_json(info.config)},
         {"source", info.source}};
  int64_t off = 0;
  std::vector<uint8_t> vblob;
  // Where the tokenizer came from, absolute (never a path relative to the directory the file was written in);
  // readers use it only when nothing is embedded.
  const std::string tok_path =
      info.tokenizer_path.empty() ? "" : std::filesystem::absolute(info.tokenizer_path).lexically_normal().string();
  h["tokenizer"] = json{{"path", tok_path}};
  if (!info.chat_template.empty()) h["tokenizer"]["chat_template"] = info.chat_template;
  if (info.vocab) {
    vblob = serialize_vocab(*info.vocab);
    h["tokenizer"]["embedded"] = json{{"offset", 0}, {"nbytes", vblob.size()}};
    off = round_up(static_cast<int64_t>(vblob.size()), kAnelabAlign);
  }
  json tj = json::array();
  std::vector<int64_t> offsets, numels;
  for (const auto& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const int64_t nb = dtype_nbytes(t.dtype, n);
    if (nb < 0) fail("model", "tensor ", t.name, " with ", n, " elements cannot be stored as ", dtype_name(t.dtype));
    tj.push_back(
        json{{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"offset", off}, {"nbytes", nb}});
    offsets.push_back(off);
    numels.push_back(n);
    off = round_up(off + nb, kAnelabAlign);
  }
  h["tensors"] = std::move(tj);
  struct PaletteAt {
    const quant::Palette* p;
    int64_t indices, lut;
  };
  std::vector<PaletteAt> pals;
  if (palettes) {
    json pj = json::array();
    for (const auto& [name, p] : *info.palettes) {
      quant::check_palette(*p, name);
      const int64_t inb = static_cast<int64_t>(p->indices.size()), lnb = static_cast<int64_t>(p->lut.size()) * 2;
      const int64_t ioff = off, loff = round_up(ioff + inb, kAnelabAlign);
      pj.push_back(json{{"name", name},
                        {"bits", p->bits},
                        {"group", p->group},
                        {"indices", {{"offset", ioff}, {"nbytes", inb}}},
                        {"lut", {{"offset", loff}, {"nbytes", lnb}}}});
      pals.push_back({p.get(), ioff, loff});
      off = round_up(loff + lnb, kAnelabAlign);
    }
    h["palettes"] = std::move(pj);
  }
  h["data_size"] = off;
  std::string header;
  try {
    header = h.dump();
  } catch (const json::exception& e) {
    fail("model", "cannot encode the header of ", path, ": ", e.what(), " (non-UTF-8 text in a name or path?)");
  }
  const uint64_t hlen = header.size(), header_sum = fnv1a64(kFnvOffset, header.data(), header.size());
  const int64_t json_at = 40, data_off = round_up(json_at + static_cast<int64_t>(hlen), kAnelabAlign);

  OutFile out;
  out.path = path;
  out.tmp = path + ".tmp." + std::to_string(platform::process_id());
  out.f = std::fopen(out.tmp.c_str(), "wb");
  if (!out.f) fail("model", "cannot create ", out.tmp, ": ", std::strerror(errno));
  std::vector<char> iobuf(4 << 20);
  std::setvbuf(out.f, iobuf.data(), _IOFBF, iobuf.size());
  out.write(kAnelabMagic, 8);
  const uint32_t ver = version, reserved = 0;
  out.write(&ver, 4);
  out.write(&reserved, 4);
  out.write(&hlen, 8);
  out.write(&header_sum, 8);
  const uint64_t data_sum_placeholder = 0;  // patched once the data section is written
  out.write(&data_sum_placeholder, 8);
  out.write(header.data(), header.size());
  out.pad_to(data_off);
  out.hash_from = data_off;
  out.write(vblob.data(), vblob.size());
  int64_t done = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    out.pad_to(data_off + offsets[i]);
    write_tensor_data(out, tensors[i], numels[i], done, off, progress);
  }
  for (const PaletteAt& pa : pals) {
    out.pad_to(data_off + pa.indices);
    out.write(pa.p->indices.data(), pa.p->indices.size());
    out.pad_to(data_off + pa.lut);
    out.write(pa.p->lut.data(), pa.p->lut.size() * 2);
  }
  out.pad_to(data_off + off);
  const int64_t total = out.pos;
  out.end_block();
  out.patch_u64(32, out.sum);
  out.commit();
  return total;
}

DType stored_dtype(DType src, const std::vector<int64_t>& shape, std::optional<DType> target) {
  if (!target) return src;
  if (shape.size() < 2) return DType::kF32;
  if (shape.back() % dtype_block(*target)) return DType::kF16;
  return *target;
}

}  // namespace anelab::models
