#include "models/io/export.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/platform.h"
#include "models/arch/arch.h"
#include "models/arch/tensors.h"
#include "models/formats/gguf.h"
#include "models/formats/safetensors.h"
#include "models/io/gguf_model.h"
#include "models/tokenizer/pretokenize.h"
#include "models/tokenizer/tokenizer.h"

namespace anelab::models {
namespace fs = std::filesystem;
using json = nlohmann::json;

const char* export_format_name(ExportFormat f) {
  switch (f) {
    case ExportFormat::kAnelab:
      return "anelab";
    case ExportFormat::kGguf:
      return "gguf";
    case ExportFormat::kSafetensors:
      return "safetensors";
    case ExportFormat::kLlama2c:
      return "llama2c";
  }
  return "?";
}

ExportFormat export_format_for(const std::string& out, const std::string& format) {
  if (!format.empty()) {
    if (format == "anelab") return ExportFormat::kAnelab;
    if (format == "gguf") return ExportFormat::kGguf;
    if (format == "safetensors" || format == "hf") return ExportFormat::kSafetensors;
    if (format == "llama2c") return ExportFormat::kLlama2c;
    fail("export", "--format '", format, "' is not one of anelab, gguf, safetensors (or hf), llama2c");
  }
  if (out.empty()) fail("export", "no output path given");
  const std::string ext = fs::path(out).extension().string();
  if (ext == ".anelab") return ExportFormat::kAnelab;
  if (ext == ".gguf") return ExportFormat::kGguf;
  if (ext == ".bin") return ExportFormat::kLlama2c;
  if (ext.empty() || out.back() == '/') return ExportFormat::kSafetensors;
  if (ext == ".safetensors")
    fail("export", out,
         ": a Hugging Face export is a directory (config.json + model.safetensors + tokenizer files); "
         "name a directory without an extension, or pass --format safetensors");
  fail("export", out, ": unknown output extension '", ext,
       "' (use .anelab, .gguf, .bin for llama2.c, a directory "
       "name without an extension for Hugging Face safetensors, or --format)");
}

Tensor permute_rope_rows(const Tensor& t, int64_t head_dim, RopeStyle from, RopeStyle to) {
  const int64_t rows = t.rows(), half = head_dim / 2, row_bytes = t.nbytes / rows;
  std::vector<uint8_t> out(static_cast<size_t>(t.nbytes));
  for (int64_t h = 0; h < rows / head_dim; ++h)
    for (int64_t j = 0; j < half; ++j)
      for (int64_t k = 0; k < 2; ++k) {
        const int64_t adjacent = h * head_dim + 2 * j + k, rotate_half = h * head_dim + k * half + j;
        const int64_t src = from == RopeStyle::kAdjacentPairs ? adjacent : rotate_half;
        const int64_t dst = to == RopeStyle::kAdjacentPairs ? adjacent : rotate_half;
        std::memcpy(out.data() + dst * row_bytes, t.data + src * row_bytes, static_cast<size_t>(row_bytes));
      }
  Tensor r = t;
  auto owned = std::make_shared<std::vector<uint8_t>>(std::move(out));
  r.data = owned->data();
  r.owner = owned;
  return r;
}

int64_t save_model(const Model& m, const std::string& path, std::optional<DType> target, const ProgressFn& progress) {
  check_complete(m, m.source_path.empty() ? path : m.source_path);
  std::vector<TensorWriteSpec> specs;
  for (const auto& s : canonical_tensors(m.config)) {
    const Tensor& t = m.tensor(s.name);
    // A palettized tensor keeps its dtype (it holds exactly its palette's values, anelab_file.h).
    const bool palettized = m.palettes.count(t.name) > 0;
    TensorWriteSpec w{t.name, palettized ? t.dtype : stored_dtype(t.dtype, t.shape, target), t.shape, nullptr, {}};
    if (w.dtype == t.dtype) {
      w.raw = t.data;
    } else {
      w.fill = [&t](int64_t b, int64_t n, float* out) { t.to_f32(b, n, out); };
    }
    specs.push_back(std::move(w));
  }
  AnelabWriteInfo info{m.config,        m.vocab ? &*m.vocab : nullptr,         m.tokenizer_path,
                       m.chat_template, m.source_format + ":" + m.source_path, &m.palettes};
  return write_anelab_file(path, info, specs, progress);
}

namespace {

// Matrices converted to dtype (stored_dtype's rule); in memory.
Model with_dtype(const Model& m, std::optional<DType> dtype) {
  if (!dtype) return m;
  Model r = copy_header(m);
  for (const Tensor& t : m.tensors()) {
    const DType d = stored_dtype(t.dtype, t.shape, dtype);
    if (d == t.dtype) {
      r.add_view(t.name, t.dtype, t.shape, t.data, t.nbytes, t.owner);
      continue;
    }
    const std::vector<float> f = t.to_f32();
    std::vector<uint8_t> bytes(static_cast<size_t>(dtype_nbytes(d, t.numel())));
    f32_to_dtype(f.data(), d, bytes.data(), t.numel());
    r.add_owned(t.name, d, t.shape, std::move(bytes));
  }
  return r;
}

std::vector<uint8_t> f32_bytes(const Tensor& t) {
  const std::vector<float> f = t.to_f32();
  std::vector<uint8_t> b(f.size() * 4);
  std::memcpy(b.data(), f.data(), b.size());
  return b;
}

// ---- Hugging Face directory ----

// The architecture's HF export (config.json keys and tensor names); throws when it has none.
const Arch& hf_exportable(const ModelConfig& c) {
  const Arch& a = arch_of(c.arch, "export");
  if (a.hf_export_config && a.hf_tensor_name) return a;
  std::string ok;
  for (const Arch* x : architectures())
    if (x->hf_export_config) ok += (ok.empty() ? "" : ", ") + x->name;
  fail("export", "Hugging Face export supports ", ok, " models; this one is ", c.arch);
}

json hf_config(const Model& m, const Arch& a) {
  json j = a.hf_export_config(m.config);
  j["torch_dtype"] = "float32";
  if (m.vocab && m.vocab->bos_id >= 0) j["bos_token_id"] = m.vocab->bos_id;
  if (m.vocab && m.vocab->eos_id >= 0) j["eos_token_id"] = m.vocab->eos_id;
  return j;
}

std::string st_dtype(DType d) {
  switch (d) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return "";  // block types have no safetensors dtype
  }
  return "";
}

std::vector<std::string> write_hf_files(const Model& src, const std::string& dir) {
  const Arch& arch = hf_exportable(src.config);
  const Model m = with_rope_style(src, RopeStyle::kRotateHalf);
  std::vector<std::string> notes;
  std::vector<StWrite> ts;
  for (const TensorSpec& s : canonical_tensors(m.config)) {
    const Tensor& t = m.tensor(s.name);
    StWrite w{arch.hf_tensor_name(s.name),
              st_dtype(t.dtype),
              arch.hf_tensor_shape ? arch.hf_tensor_shape(s.name, t.shape) : t.shape,
              {}};
    if (w.dtype.empty()) {  // a block type: written as F32
      w.dtype = "F32";
      w.bytes = f32_bytes(t);
    } else {
      w.bytes.assign(t.data, t.data + t.nbytes);
    }
    ts.push_back(std::move(w));
  }
  const std::vector<uint8_t> st = build_safetensors(ts);
  write_file_atomic((fs::path(dir) / "model.safetensors").string(), st.data(), st.size());
  write_file_atomic((fs::path(dir) / "config.json").string(), hf_config(m, arch).dump(2) + "\n");
  if (!m.vocab) {
    notes.push_back(cat(dir, ": no tokenizer written (the model carries none; pass --tokenizer)"));
  } else if (m.vocab->kind != tok::TokenizerKind::kByteBpe) {
    notes.push_back(cat(dir,
                        ": no tokenizer written (SentencePiece vocabularies are not exported as tokenizer.json "
                        "yet; pass --tokenizer to anelab, or add the original tokenizer.model)"));
  } else {
    const tok::VocabData& v = *m.vocab;
    write_file_atomic((fs::path(dir) / "tokenizer.json").string(), vocab_to_hf_tokenizer_json(v));
    auto name = [&](int32_t id) {
      return id >= 0 && id < int32_t(v.tokens.size()) ? json(v.tokens[id]) : json(nullptr);
    };
    json tc = {{"tokenizer_class", "PreTrainedTokenizerFast"},
               {"bos_token", name(v.bos_id)},
               {"eos_token", name(v.eos_id)},
               {"add_bos_token", v.add_bos},
               {"model_max_length", m.config.max_seq_len}};
    if (v.pad_id >= 0) tc["pad_token"] = name(v.pad_id);
    if (!m.chat_template.empty()) tc["chat_template"] = m.chat_template;
    write_file_atomic((fs::path(dir) / "tokenizer_config.json").string(), tc.dump(2) + "\n");
  }
  return notes;
}

// The directory's files are written into OUT.tmp.<pid> first and moved into OUT once all of them are complete
// (a rename of the directory when OUT does not exist, else one rename per file), so a failed export leaves no
// partial directory and no partial file set.
std::vector<std::string> write_hf_dir(const Model& src, const std::string& out) {
  fs::path final_dir = fs::path(out).lexically_normal();
  if (final_dir.filename().empty()) final_dir = final_dir.parent_path();                       // "OUT/"
  const fs::path tmp = final_dir.string() + ".tmp." + std::to_string(platform::process_id());  // as write_file_atomic
  std::error_code ec;
  fs::remove_all(tmp, ec);
  std::vector<std::string> notes;
  try {
    fs::create_directories(tmp);
    notes = write_hf_files(src, tmp.string());
    for (std::string& n : notes)  // the notes name the directory the user asked for
      if (n.rfind(tmp.string(), 0) == 0) n = out + n.substr(tmp.string().size());
    if (!fs::exists(final_dir)) {
      fs::rename(tmp, final_dir);
      return notes;
    }
    if (!fs::is_directory(final_dir)) fail("export", out, " exists and is not a directory");
    for (const auto& e : fs::directory_iterator(tmp)) fs::rename(e.path(), final_dir / e.path().filename());
    fs::remove(tmp);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    fail("export", out, ": ", e.what());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return notes;
}

// ---- llama2.c legacy ----

void write_llama2c(const Model& src, const std::string& out) {
  const ModelConfig& c = src.config;
  if (c.arch != "llama" || c.qkv_bias || c.attn_out_bias || c.mlp_bias || c.norm != NormType::kRms ||
      c.activation != Activation::kSilu || c.learned_pos)
    fail("export", out, ": llama2.c files hold Llama models without biases (this one is ", c.arch, ")");
  if (c.head_dim * c.n_heads != c.dim)
    fail("export", out, ": llama2.c needs head_dim * n_heads == dim (", c.head_dim, " * ", c.n_heads, " != ", c.dim,
         ")");
  if (c.norm_eps != 1e-5f || c.rope_theta != 10000.0f || c.rope_scaling.type != RopeScalingType::kNone)
    fail("export", out, ": llama2.c fixes RMSNorm eps 1e-5 and unscaled RoPE theta 10000; this model has eps ",
         c.norm_eps, ", theta ", c.rope_theta, ", scaling ", rope_scaling_name(c.rope_scaling.type));
  const Model m = with_rope_style(src, RopeStyle::kAdjacentPairs);
  std::vector<uint8_t> b;
  auto put_i32 = [&](int64_t v) {
    const int32_t x = static_cast<int32_t>(v);
    b.insert(b.end(), reinterpret_cast<const uint8_t*>(&x), reinterpret_cast<const uint8_t*>(&x) + 4);
  };
  auto put_f32 = [&](const std::vector<float>& f) {
    b.insert(b.end(), reinterpret_cast<const uint8_t*>(f.data()),
             reinterpret_cast<const uint8_t*>(f.data() + f.size()));
  };
  for (int64_t v : {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads}) put_i32(v);
  put_i32(c.tied_embeddings ? c.vocab_size : -c.vocab_size);
  put_i32(c.max_seq_len);
  put_f32(m.tensor("tok_embeddings").to_f32());
  for (const char* leaf : {"attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3"})
    for (int64_t l = 0; l < c.n_layers; ++l) put_f32(m.tensor(cat("layers.", l, ".", leaf)).to_f32());
  put_f32(m.tensor("norm").to_f32());
  std::vector<float> re, im;  // freq_cis tables [seq_len, head_dim/2] (run.c skips them; export.py wrote them)
  for (int64_t p = 0; p < c.max_seq_len; ++p)
    for (int64_t j = 0; j < c.head_dim / 2; ++j) {
      const double f = double(p) / std::pow(double(c.rope_theta), 2.0 * double(j) / double(c.head_dim));
      re.push_back(static_cast<float>(std::cos(f)));
      im.push_back(static_cast<float>(std::sin(f)));
    }
  put_f32(re);
  put_f32(im);
  if (!c.tied_embeddings) put_f32(m.tensor("output").to_f32());
  write_file_atomic(out, b.data(), b.size());
}

}  // namespace

Model copy_header(const Model& m) {
  Model r;
  r.config = m.config;
  r.vocab = m.vocab;
  r.tokenizer_path = m.tokenizer_path;
  r.chat_template = m.chat_template;
  r.source_format = m.source_format;
  r.source_path = m.source_path;
  return r;
}

Model with_rope_style(const Model& m, RopeStyle target) {
  const RopeStyle from = m.config.rope_style;
  if (from == target) return m;
  if (from == RopeStyle::kNone || target == RopeStyle::kNone)
    fail("export", "cannot convert RoPE style ", rope_style_name(from), " to ", rope_style_name(target),
         " (learned positions have no RoPE)");
  Model r = copy_header(m);
  r.config.rope_style = target;
  for (const Tensor& t : m.tensors()) {
    const std::string leaf = t.name.substr(t.name.rfind('.') + 1);
    if (t.name.starts_with("layers.") && (leaf == "wq" || leaf == "wk" || leaf == "bq" || leaf == "bk")) {
      const Tensor p = permute_rope_rows(t, m.config.head_dim, from, target);
      r.add_view(p.name, p.dtype, p.shape, p.data, p.nbytes, p.owner);
    } else {
      r.add_view(t.name, t.dtype, t.shape, t.data, t.nbytes, t.owner);
    }
  }
  return r;
}

std::string vocab_to_hf_tokenizer_json(const tok::VocabData& v) {
  if (v.kind != tok::TokenizerKind::kByteBpe)
    fail("export", "only byte-level BPE vocabularies have a tokenizer.json here");
  json vocab = json::object(), added = json::array();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const tok::TokenType t = v.types.empty() ? tok::TokenType::kNormal : v.types[i];
    if (t == tok::TokenType::kUnused) continue;
    if (t == tok::TokenType::kControl || t == tok::TokenType::kUserDefined)
      added.push_back({{"id", i},
                       {"content", v.tokens[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", t == tok::TokenType::kControl}});
    else
      vocab[v.tokens[i]] = i;
  }
  json merges = json::array();
  for (const std::string& mg : v.merges) {
    const size_t sp = mg.find(' ');
    if (sp == std::string::npos) fail("export", "merge '", mg, "' is not \"a b\"");
    merges.push_back(json::array({mg.substr(0, sp), mg.substr(sp + 1)}));
  }
  const tok::PreTokenizer pre = tok::select_pretokenizer(v.pre, v.pre_regex);
  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  json pre_tok = byte_level;
  if (pre != tok::PreTokenizer::kGpt2) {
    json bl = byte_level;
    bl["use_regex"] = false;
    pre_tok = {{"type", "Sequence"},
               {"pretokenizers", json::array({json{{"type", "Split"},
                                                   {"pattern", {{"Regex", tok::pretokenizer_regex(pre)}}},
                                                   {"behavior", "Isolated"},
                                                   {"invert", false}},
                                              bl})}};
  }
  json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", v.nfc_normalize ? json{{"type", "NFC"}} : json(nullptr)},
      {"pre_tokenizer", pre_tok},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}}};
  return j.dump(1) + "\n";
}

std::vector<std::string> export_model(const Model& src, const std::string& out, ExportFormat f,
                                      std::optional<DType> dtype, const ProgressFn& progress) {
  check_complete(src, src.source_path.empty() ? out : src.source_path);
  // Every export carries its tokenizer: one the model only names by path is read and embedded here, so the
  // output never depends on a file relative to the directory it was made in.
  Model named;
  if (!src.vocab && !src.tokenizer_path.empty()) {
    named = src;
    named.vocab = tok::load_vocab_file(src.tokenizer_path);
  }
  const Model& m = named.vocab ? named : src;
  switch (f) {
    case ExportFormat::kAnelab:
      save_model(m, out, dtype, progress);
      return {};
    case ExportFormat::kGguf: {
      const RopeStyle want = arch_of(m.config.arch, out).gguf_rope.value_or(m.config.rope_style);
      const Model g = with_rope_style(with_dtype(m, dtype), want);
      std::vector<std::string> notes;
      write_gguf_model(g, out, &notes);
      if (!g.vocab)
        notes.push_back(cat(out,
                            ": no tokenizer embedded (the model carries none; pass --tokenizer); llama.cpp loads it "
                            "as a model without a vocabulary (llama-bench runs it, text generation cannot)"));
      return notes;
    }
    case ExportFormat::kSafetensors:
      return write_hf_dir(with_dtype(m, dtype), out);
    case ExportFormat::kLlama2c:
      if (dtype && *dtype != DType::kF32) fail("export", out, ": llama2.c files are fp32 (drop --dtype)");
      write_llama2c(m, out);
      return {cat(out, ": llama2.c files hold no tokenizer; pass --tokenizer when running it")};
  }
  return {};
}

}  // namespace anelab::models
