// Vocab readers: llama2.c tokenizer.bin, GPT-2 encoder.json + vocab.bpe, Hugging Face tokenizer.json.
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/tokenizer/tokenizer.h"

namespace anelab::tok {
namespace {

using nlohmann::json;

json parse_json(std::string_view text, const std::string& name) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    fail("tokenizer", name, ": malformed JSON: ", e.what());
  }
}

}  // namespace

// llama2.c tokenizer.bin: int32 max_token_length, then per token: f32 score, int32 len, len bytes.
// The token count is not stored: records are read to the end of the file. llama2.c's export writes BOS/EOS
// as "\n<s>\n" / "\n</s>\n"; they are stored here as "<s>" / "</s>". Ids 0/1/2 = unk/bos/eos.
VocabData parse_vocab_llama2c(const uint8_t* data, size_t size, const std::string& name) {
  auto rd32 = [&](size_t off) {
    uint32_t v;
    std::memcpy(&v, data + off, 4);
    return v;
  };
  ANELAB_CHECK(size >= 4, "tokenizer", name, ": truncated llama2.c tokenizer (", size, " bytes, no header)");
  const int32_t max_len = static_cast<int32_t>(rd32(0));
  ANELAB_CHECK(max_len > 0 && max_len <= 4096, "tokenizer", name, ": max_token_length ", max_len,
               " out of range (1..4096); not a llama2.c tokenizer.bin?");
  VocabData v;
  v.kind = TokenizerKind::kSentencePiece;
  size_t off = 4;
  while (off < size) {
    const size_t idx = v.tokens.size();
    ANELAB_CHECK(size - off >= 8, "tokenizer", name, ": truncated at byte ", off, " (record of token ", idx, ")");
    float score;
    std::memcpy(&score, data + off, 4);
    const int32_t len = static_cast<int32_t>(rd32(off + 4));
    off += 8;
    ANELAB_CHECK(len >= 0 && len <= max_len, "tokenizer", name, ": token ", idx, " has length ", len,
                 " (max_token_length ", max_len, "); file corrupt");
    ANELAB_CHECK(size - off >= static_cast<size_t>(len), "tokenizer", name, ": truncated at byte ", off, " (token ",
                 idx, " needs ", len, " bytes)");
    ANELAB_CHECK(score == score, "tokenizer", name, ": token ", idx, " has a NaN score");
    v.tokens.emplace_back(reinterpret_cast<const char*>(data + off), len);
    v.scores.push_back(score);
    off += len;
  }
  ANELAB_CHECK(v.tokens.size() >= 3, "tokenizer", name, ": only ", v.tokens.size(), " tokens (need unk, bos, eos)");
  v.unk_id = 0, v.bos_id = 1, v.eos_id = 2;
  if (v.tokens[1] == "\n<s>\n") v.tokens[1] = "<s>";
  if (v.tokens[2] == "\n</s>\n") v.tokens[2] = "</s>";
  v.types.assign(v.tokens.size(), TokenType::kNormal);
  v.types[0] = TokenType::kUnknown;
  v.types[1] = v.types[2] = TokenType::kControl;
  for (size_t i = 3; i < v.tokens.size(); ++i) {
    const std::string& t = v.tokens[i];
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
        std::isxdigit(static_cast<unsigned char>(t[3])) && std::isxdigit(static_cast<unsigned char>(t[4])))
      v.types[i] = TokenType::kByte;
  }
  v.add_bos = true;
  v.add_space_prefix = true;
  return v;
}

VocabData load_vocab_llama2c(const std::string& path) {
  MappedFile f(path);
  return parse_vocab_llama2c(f.data(), f.size(), path);
}

VocabData parse_vocab_gpt2(std::string_view encoder_json, std::string_view vocab_bpe, const std::string& name) {
  const json enc = parse_json(encoder_json, name + "/encoder.json");
  ANELAB_CHECK(enc.is_object() && !enc.empty(), "tokenizer", name,
               "/encoder.json: expected a non-empty object token -> id");
  VocabData v;
  v.kind = TokenizerKind::kByteBpe;
  v.pre = "gpt2";
  v.tokens.resize(enc.size());
  std::vector<bool> seen(enc.size(), false);
  for (auto it = enc.begin(); it != enc.end(); ++it) {
    ANELAB_CHECK(it.value().is_number_integer(), "tokenizer", name, "/encoder.json: id of '", it.key(),
                 "' is not an integer");
    const int64_t id = it.value().get<int64_t>();
    ANELAB_CHECK(id >= 0 && id < static_cast<int64_t>(enc.size()) && !seen[id], "tokenizer", name, "/encoder.json: id ",
                 id, " of '", it.key(), "' is out of range or duplicated (ids must be 0..", enc.size() - 1, ")");
    seen[id] = true;
    v.tokens[id] = it.key();
  }
  v.types.assign(v.tokens.size(), TokenType::kNormal);
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (v.tokens[i] == "<|endoftext|>") v.types[i] = TokenType::kControl, v.bos_id = v.eos_id = static_cast<int32_t>(i);
  size_t pos = 0, line_no = 0;
  while (pos < vocab_bpe.size()) {
    size_t nl = vocab_bpe.find('\n', pos);
    if (nl == std::string_view::npos) nl = vocab_bpe.size();
    std::string_view line = vocab_bpe.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    v.merges.emplace_back(line);
  }
  ANELAB_CHECK(!v.merges.empty(), "tokenizer", name, "/vocab.bpe: no merges");
  v.add_space_prefix = false;
  return v;
}

VocabData load_vocab_gpt2(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string enc = (fs::path(dir) / "encoder.json").string(), bpe = (fs::path(dir) / "vocab.bpe").string();
  return parse_vocab_gpt2(read_file_text(enc), read_file_text(bpe), dir);
}

namespace {

std::string special_name(const json& j) {  // tokenizer_config.json: "eos_token": "x" or {"content": "x"}
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return "";
}

void read_normalizer(const json& n, VocabData& v, const std::string& name) {
  if (n.is_null()) return;
  const std::string type = n.value("type", "");
  if (type == "NFC") {
    v.nfc_normalize = true;
  } else if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
    for (const json& s : n["normalizers"]) read_normalizer(s, v, name);
  } else {
    fail("tokenizer", name, ": unsupported normalizer '", n.dump().substr(0, 200), "' (supported: none, NFC)");
  }
}

void read_pre_tokenizer(const json& p, VocabData& v, const std::string& name) {
  const std::string type = p.is_object() ? p.value("type", "") : "";
  if (type == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array()) {
    for (const json& s : p["pretokenizers"]) read_pre_tokenizer(s, v, name);
  } else if (type == "Split" && p.contains("pattern") && p["pattern"].is_object() && p["pattern"].contains("Regex") &&
             p["pattern"]["Regex"].is_string()) {
    v.pre_regex = p["pattern"]["Regex"].get<std::string>();
  } else if (type == "ByteLevel") {
    if (p.value("use_regex", true) && v.pre_regex.empty()) v.pre = "gpt2";
    ANELAB_CHECK(!p.value("add_prefix_space", false), "tokenizer", name,
                 ": ByteLevel add_prefix_space=true is not supported");
  } else {
    fail("tokenizer", name, ": unsupported pre_tokenizer '", p.dump().substr(0, 200),
         "' (supported: Split with the GPT-2 or Qwen2 regex, ByteLevel)");
  }
}

std::string merge_string(const json& m, size_t i, const std::string& name) {
  if (m.is_string()) return m.get<std::string>();
  ANELAB_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), "tokenizer", name,
               ": model.merges[", i, "] is neither \"a b\" nor [\"a\", \"b\"]");
  return m[0].get<std::string>() + " " + m[1].get<std::string>();
}

}  // namespace

namespace {
VocabData vocab_from_hf_json(const json& j, const std::string& name) {
  ANELAB_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), "tokenizer", name,
               ": no \"model\" object; not a Hugging Face tokenizer.json");
  const json& m = j["model"];
  ANELAB_CHECK(m.value("type", "BPE") == "BPE", "tokenizer", name, ": model.type '", m.value("type", ""),
               "' is not supported (only byte-level BPE)");
  ANELAB_CHECK(!m.value("ignore_merges", false), "tokenizer", name, ": model.ignore_merges=true is not supported");
  ANELAB_CHECK(m.contains("vocab") && m["vocab"].is_object() && !m["vocab"].empty(), "tokenizer", name,
               ": model.vocab must be a non-empty object");
  ANELAB_CHECK(m.contains("merges") && m["merges"].is_array(), "tokenizer", name, ": model.merges must be an array");
  VocabData v;
  v.kind = TokenizerKind::kByteBpe;
  auto put = [&](const std::string& tok, const json& idj, TokenType type) {
    ANELAB_CHECK(idj.is_number_integer(), "tokenizer", name, ": id of token '", tok, "' is not an integer");
    const int64_t id = idj.get<int64_t>();
    ANELAB_CHECK(id >= 0 && id < (1 << 24), "tokenizer", name, ": id ", id, " of token '", tok, "' out of range");
    if (static_cast<size_t>(id) >= v.tokens.size()) {
      v.tokens.resize(id + 1);
      v.types.resize(id + 1, TokenType::kUnused);
    }
    ANELAB_CHECK(v.types[id] == TokenType::kUnused || v.tokens[id] == tok, "tokenizer", name, ": id ", id,
                 " is used by both '", v.tokens[id], "' and '", tok, "'");
    v.tokens[id] = tok;
    v.types[id] = type;
  };
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) put(it.key(), it.value(), TokenType::kNormal);
  if (j.contains("added_tokens")) {
    ANELAB_CHECK(j["added_tokens"].is_array(), "tokenizer", name, ": added_tokens must be an array");
    for (const json& a : j["added_tokens"]) {
      ANELAB_CHECK(a.is_object() && a.contains("content") && a["content"].is_string() && a.contains("id"), "tokenizer",
                   name, ": added_tokens entry ", a.dump().substr(0, 100), " lacks id/content");
      put(a["content"].get<std::string>(), a["id"],
          a.value("special", false) ? TokenType::kControl : TokenType::kUserDefined);
    }
  }
  const json& merges = m["merges"];
  v.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) v.merges.push_back(merge_string(merges[i], i, name));
  if (j.contains("normalizer")) read_normalizer(j["normalizer"], v, name);
  if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null()) read_pre_tokenizer(j["pre_tokenizer"], v, name);
  ANELAB_CHECK(!v.pre.empty() || !v.pre_regex.empty(), "tokenizer", name, ": no pre-tokenizer regex found");
  v.add_space_prefix = false;
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (v.tokens[i] == "<|endoftext|>") v.eos_id = static_cast<int32_t>(i);
  return v;
}
}  // namespace

VocabData parse_vocab_hf_json(std::string_view text, const std::string& name) {
  const json j = parse_json(text, name);
  try {
    return vocab_from_hf_json(j, name);
  } catch (const json::exception& e) {  // a field of another type than expected, e.g. "type": 3
    fail("tokenizer", name, ": malformed tokenizer.json: ", e.what());
  }
}

VocabData load_vocab_hf_json(const std::string& path) {
  namespace fs = std::filesystem;
  VocabData v = parse_vocab_hf_json(read_file_text(path), path);
  const fs::path cfg = fs::path(path).parent_path() / "tokenizer_config.json";
  if (fs::exists(cfg)) {
    const json c = parse_json(read_file_text(cfg.string()), cfg.string());
    auto lookup = [&](const char* field) -> int32_t {
      if (!c.is_object() || !c.contains(field)) return -1;
      const std::string s = special_name(c[field]);
      for (size_t i = 0; i < v.tokens.size(); ++i)
        if (!s.empty() && v.tokens[i] == s) return static_cast<int32_t>(i);
      return -1;
    };
    if (int32_t e = lookup("eos_token"); e >= 0) v.eos_id = e;
    if (int32_t b = lookup("bos_token"); b >= 0) v.bos_id = b;
    if (int32_t p = lookup("pad_token"); p >= 0) v.pad_id = p;
    const json add_bos = c.is_object() && c.contains("add_bos_token") ? c["add_bos_token"] : json();
    ANELAB_CHECK(add_bos.is_null() || add_bos.is_boolean(), "tokenizer", cfg.string(),
                 ": add_bos_token must be true/false, got ", add_bos.dump());
    v.add_bos = add_bos.is_boolean() && add_bos.get<bool>() && v.bos_id >= 0;
  }
  return v;
}

}  // namespace anelab::tok
