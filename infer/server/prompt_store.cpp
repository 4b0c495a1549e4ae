#include "infer/server/prompt_store.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/quant/mat.h"
#include "models/formats/checkpoint_header.h"

namespace anelab::serve {

// ---------------------------------------------------------------------------------------------------------------
// PromptStore
// ---------------------------------------------------------------------------------------------------------------

namespace {

// Tokens a and b have in common from the start.
size_t store_common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  size_t c = 0;
  while (c < a.size() && c < b.size() && a[c] == b[c]) ++c;
  return c;
}

}  // namespace

std::pair<std::shared_ptr<const PromptStore::Entry>, size_t> PromptStore::find(std::span<const int32_t> prompt,
                                                                               const std::vector<float>& lora) {
  if (prompt.size() < 2) return {nullptr, 0};
  const std::span<const int32_t> usable = prompt.first(prompt.size() - 1);
  auto best = lru_.end();
  size_t best_n = 0;
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    const Entry& e = **it;
    if (e.lora != lora) continue;
    size_t c = store_common_prefix(e.tokens, usable);
    if (whole_only_ && c != e.tokens.size()) c = 0;
    if (c > best_n) best = it, best_n = c;
  }
  if (best == lru_.end()) return {nullptr, 0};
  lru_.splice(lru_.begin(), lru_, best);
  return {lru_.front(), best_n};
}

bool PromptStore::covers(std::span<const int32_t> tokens, const std::vector<float>& lora) {
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    const Entry& e = **it;
    if (e.lora != lora || e.tokens.size() < tokens.size() || (whole_only_ && e.tokens.size() != tokens.size()))
      continue;
    if (store_common_prefix(e.tokens, tokens) == tokens.size()) {
      lru_.splice(lru_.begin(), lru_, it);
      return true;
    }
  }
  return false;
}

void PromptStore::put(Entry e) {
  const int64_t b = e.bytes();
  if (!enabled() || b > capacity_ || e.tokens.empty()) return;
  // Entries the new one covers (a prefix of it, same scales) serve nothing it does not.
  if (!whole_only_)
    for (auto it = lru_.begin(); it != lru_.end();) {
      const Entry& x = **it;
      if (x.lora == e.lora && x.tokens.size() <= e.tokens.size() &&
          store_common_prefix(x.tokens, e.tokens) == x.tokens.size()) {
        bytes_ -= x.bytes();
        it = lru_.erase(it);
      } else {
        ++it;
      }
    }
  while (!lru_.empty() && bytes_ + b > capacity_) {
    bytes_ -= lru_.back()->bytes();
    lru_.pop_back();
    ++stats_.evicted;
  }
  bytes_ += b;
  lru_.push_front(std::make_shared<const Entry>(std::move(e)));
  ++stats_.stored;
}

PromptStore::Stats PromptStore::stats() const {
  Stats s = stats_;
  s.capacity = capacity_, s.bytes = bytes_, s.entries = static_cast<int64_t>(lru_.size());
  return s;
}

// ---------------------------------------------------------------------------------------------------------------
// Slot files
// ---------------------------------------------------------------------------------------------------------------

namespace {

constexpr char kSlotMagic[8] = {'A', 'N', 'E', 'S', 'L', 'O', 'T', '\0'};
constexpr size_t kSlotHashEdge = 4096;  // bytes of each tensor's start and end in the weights hash

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

nlohmann::json fingerprint_json(const SlotFingerprint& f) {
  return {{"arch", f.arch},
          {"vocab_size", f.vocab_size},
          {"n_layers", f.n_layers},
          {"dim", f.dim},
          {"kv_dim", f.kv_dim},
          {"kv_layers", f.kv_layers},
          {"kv_type", f.kv_type},
          {"dtype", f.dtype},
          {"delta_floats", f.delta_floats},
          {"conv_floats", f.conv_floats},
          {"weights", f.weights},
          {"adapters", f.adapters}};
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}

}  // namespace

std::string slot_weights_hash(const models::Model& m) {
  uint64_t h = models::kFnvOffset;
  for (const models::Tensor& t : m.tensors()) {
    h = models::fnv1a64(h, t.name.data(), t.name.size());
    const auto dt = static_cast<int64_t>(t.dtype);
    h = models::fnv1a64(h, &dt, sizeof dt);
    for (int64_t d : t.shape) h = models::fnv1a64(h, &d, sizeof d);
    const auto n = static_cast<size_t>(t.nbytes), edge = std::min(n, kSlotHashEdge);
    if (t.data) {
      h = models::fnv1a64(h, t.data, edge);
      h = models::fnv1a64(h, t.data + (n - edge), edge);
    }
  }
  return hex64(h);
}

std::string slot_adapters_hash(const std::vector<models::LoraAdapter>& adapters) {
  auto mix = [](uint64_t h, const auto& v) { return models::fnv1a64(h, &v, sizeof v); };
  uint64_t h = mix(models::kFnvOffset, static_cast<uint64_t>(adapters.size()));
  for (const models::LoraAdapter& a : adapters) {
    h = mix(mix(mix(h, a.rank), a.alpha), static_cast<uint64_t>(a.pairs.size()));
    for (const models::LoraPair& p : a.pairs) {
      h = models::fnv1a64(h, p.tensor.data(), p.tensor.size());
      h = mix(mix(h, p.in), p.out);
      h = models::fnv1a64(h, p.a.data(), p.a.size() * sizeof(float));
      h = models::fnv1a64(h, p.b.data(), p.b.size() * sizeof(float));
    }
  }
  return hex64(h);
}

SlotFingerprint slot_fingerprint(const infer::Engine& e, std::string weights_hash, std::string adapters_hash) {
  const models::ModelConfig& c = e.config();
  SlotFingerprint f;
  f.arch = c.arch;
  f.kv_type = infer::kv_type_name(e.options().kv_type);
  f.dtype = quant::wtype_name(e.options().dtype);
  f.vocab_size = c.vocab_size, f.n_layers = c.n_layers, f.dim = c.dim, f.kv_dim = c.kv_dim();
  f.kv_layers = e.kv_layers(), f.context = e.context();
  for (const models::LayerDesc& l : e.desc().layers)  // the state sizes of save_seq (infer/engine.h)
    for (const models::Step& s : l.steps)
      if (s.kind == models::StepKind::kLinearAttention) {
        const models::DeltaNetDesc& d = s.deltanet;
        f.delta_floats += d.n_v_heads * d.k_dim * d.v_dim;
        f.conv_floats += (d.conv_kernel - 1) * d.conv_dim();
      }
  f.weights = std::move(weights_hash);
  f.adapters = std::move(adapters_hash);
  return f;
}

int64_t write_slot_file(const std::string& path, const SlotFingerprint& fp, const std::vector<int32_t>& tokens,
                        const std::vector<float>& lora, const infer::Engine::SeqSnapshot& seq) {
  ANELAB_CHECK(static_cast<int64_t>(tokens.size()) == seq.n, "serve", "slot file ", path, ": ", tokens.size(),
               " tokens for a sequence of ", seq.n);
  const nlohmann::json header{{"model", fingerprint_json(fp)},
                              {"n_tokens", seq.n},
                              {"lora", lora},
                              {"k_bytes", seq.k.size()},
                              {"v_bytes", seq.v.size()}};
  const std::string h = header.dump();
  std::vector<uint8_t> out;
  out.reserve(static_cast<size_t>(seq.bytes()) + h.size() + tokens.size() * 4 + 32);
  put_bytes(out, kSlotMagic, sizeof kSlotMagic);
  put_u32(out, kSlotFileVersion);
  put_u32(out, static_cast<uint32_t>(h.size()));
  put_bytes(out, h.data(), h.size());
  for (int32_t t : tokens) put_u32(out, static_cast<uint32_t>(t));
  put_bytes(out, seq.k.data(), seq.k.size());
  put_bytes(out, seq.v.data(), seq.v.size());
  for (const std::vector<float>* s : {&seq.delta, &seq.conv})
    for (float x : *s) {
      uint32_t u = 0;
      std::memcpy(&u, &x, 4);
      put_u32(out, u);
    }
  const uint64_t sum = models::fnv1a64(models::kFnvOffset, out.data(), out.size());
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(sum >> (8 * i)));
  write_file_atomic(path, out.data(), out.size());
  return static_cast<int64_t>(out.size());
}

int64_t read_slot_file(const std::string& path, const SlotFingerprint& fp, PromptStore::Entry& out) {
  const std::string name = std::filesystem::path(path).filename().string();
  auto bad = [&](const std::string& why) { fail("serve", "slot file ", name, ": ", why); };
  const std::vector<uint8_t> b = read_file_bytes(path);
  if (b.size() < 16 + 8 || std::memcmp(b.data(), kSlotMagic, sizeof kSlotMagic) != 0)
    bad("not a slot file (no \"ANESLOT\" magic)");
  const uint32_t version = get_u32(b.data() + 8), hlen = get_u32(b.data() + 12);
  if (version != kSlotFileVersion)
    bad("version " + std::to_string(version) + ", this server reads version " + std::to_string(kSlotFileVersion));
  uint64_t sum = 0;
  for (int i = 0; i < 8; ++i) sum |= static_cast<uint64_t>(b[b.size() - 8 + static_cast<size_t>(i)]) << (8 * i);
  if (models::fnv1a64(models::kFnvOffset, b.data(), b.size() - 8) != sum)
    bad("checksum mismatch (truncated or damaged)");
  if (hlen > b.size() - 24) bad("header of " + std::to_string(hlen) + " bytes past the end of the file");
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(b.begin() + 16, b.begin() + 16 + hlen);
  } catch (const std::exception& e) {
    bad(std::string("header is not JSON: ") + e.what());
  }
  // Each field of the model, against this server's: the first that differs is named.
  const nlohmann::json mine = fingerprint_json(fp);
  if (!h.contains("model") || !h["model"].is_object()) bad("header has no \"model\" object");
  for (const auto& [k, v] : mine.items()) {
    const nlohmann::json& theirs = h["model"].contains(k) ? h["model"][k] : nlohmann::json(nullptr);
    if (theirs != v)
      bad("model." + k + " is " + theirs.dump() + ", this server's model has " + v.dump() +
          " (the file was saved by another model or settings)");
  }
  auto count = [&](const char* field) {
    if (!h.contains(field) || !h[field].is_number_unsigned()) bad(std::string("header field ") + field + " missing");
    return h[field].get<uint64_t>();
  };
  const uint64_t n = count("n_tokens"), kb = count("k_bytes"), vb = count("v_bytes");
  if (n < 1 || static_cast<int64_t>(n) > fp.context)
    bad("n_tokens " + std::to_string(n) + " outside [1, " + std::to_string(fp.context) + "]");
  const uint64_t row = static_cast<uint64_t>(fp.kv_layers * fp.kv_dim * (fp.kv_type == "f16" ? 2 : 4));
  if (kb != n * row || vb != kb)
    bad("k_bytes / v_bytes " + std::to_string(kb) + " / " + std::to_string(vb) + ", " + std::to_string(n) +
        " positions of this model take " + std::to_string(n * row));
  if (!h.contains("lora") || !h["lora"].is_array()) bad("header field lora missing");
  std::vector<float> lora;
  for (const auto& x : h["lora"]) {
    if (!x.is_number()) bad("lora holds " + x.dump() + ", not a number");
    lora.push_back(x.get<float>());
  }
  const uint64_t floats = static_cast<uint64_t>(fp.delta_floats + fp.conv_floats);
  const uint64_t need = 16 + hlen + 4 * n + kb + vb + 4 * floats + 8;
  if (b.size() != need) bad(std::to_string(b.size()) + " bytes, its header describes " + std::to_string(need));
  const uint8_t* p = b.data() + 16 + hlen;
  out.tokens.resize(n);
  for (auto& t : out.tokens) t = static_cast<int32_t>(get_u32(p)), p += 4;
  out.lora = std::move(lora);
  out.seq.n = static_cast<int64_t>(n);
  out.seq.k.assign(reinterpret_cast<const std::byte*>(p), reinterpret_cast<const std::byte*>(p + kb));
  p += kb;
  out.seq.v.assign(reinterpret_cast<const std::byte*>(p), reinterpret_cast<const std::byte*>(p + vb));
  p += vb;
  out.seq.delta.resize(static_cast<size_t>(fp.delta_floats));
  out.seq.conv.resize(static_cast<size_t>(fp.conv_floats));
  for (std::vector<float>* s : {&out.seq.delta, &out.seq.conv})
    for (float& x : *s) {
      const uint32_t u = get_u32(p);
      std::memcpy(&x, &u, 4);
      p += 4;
    }
  return static_cast<int64_t>(b.size());
}

std::string slot_filename_problem(const std::string& name) {
  if (name.empty()) return "is empty";
  if (name.size() > 255) return "is longer than 255 bytes";
  if (name.find("..") != std::string::npos) return "contains '..' (files stay inside --slot-save-path)";
  if (name.find('/') != std::string::npos || name.find('\\') != std::string::npos)
    return "contains a path separator (files stay inside --slot-save-path)";
  if (name.front() == '.') return "starts with '.'";
  for (unsigned char c : name)
    if (c < 0x20 || c == 0x7f) return "contains a control character";
  return "";
}

}  // namespace anelab::serve
