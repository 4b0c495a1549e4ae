#include "models/tokenizer/token_file.h"

#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "framework/core/file.h"

namespace anelab::tok {

std::vector<std::string_view> split_paragraphs(std::string_view text) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t e = text.find("\n\n", pos);
    if (e == std::string_view::npos) {
      out.push_back(text.substr(pos));
      break;
    }
    out.push_back(text.substr(pos, e - pos));
    pos = e + 2;
  }
  return out;
}

int32_t document_separator(const Tokenizer& tok) {
  if (tok.bos_id() >= 0) return tok.bos_id();
  if (int32_t id = tok.token_to_id("<|endoftext|>"); id >= 0) return id;
  return tok.eos_id();
}

std::vector<int32_t> encode_documents(const Tokenizer& tok, std::string_view text, int64_t* n_documents, bool whole) {
  const int32_t sep = document_separator(tok);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  const auto paras = whole ? std::vector<std::string_view>{text} : split_paragraphs(text);
  for (size_t i = 0; i < paras.size(); ++i) {
    if (sep >= 0) ids.push_back(sep);
    try {
      const auto p = tok.encode(paras[i]);
      ids.insert(ids.end(), p.begin(), p.end());
    } catch (const Error& e) {
      fail("tokenize", "paragraph ", i + 1, " (byte ", paras[i].data() - text.data(), "): ", e.what());
    }
  }
  if (n_documents) *n_documents = static_cast<int64_t>(paras.size());
  return ids;
}

TokenFileInfo write_token_file(const Tokenizer& tok, std::string_view text, const std::string& out_path,
                               const std::string& tokenizer_label, bool whole) {
  TokenFileInfo info;
  const auto ids = encode_documents(tok, text, &info.n_documents, whole);
  info.n_tokens = static_cast<int64_t>(ids.size());
  info.separator_id = document_separator(tok);
  const bool wide = tok.vocab_size() > 65536;
  info.dtype = wide ? "uint32" : "uint16";
  std::vector<uint8_t> bytes(ids.size() * (wide ? 4 : 2));
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t v = static_cast<uint32_t>(ids[i]);
    if (wide) {
      for (int k = 0; k < 4; ++k) bytes[4 * i + k] = static_cast<uint8_t>(v >> (8 * k));
    } else {
      bytes[2 * i] = static_cast<uint8_t>(v), bytes[2 * i + 1] = static_cast<uint8_t>(v >> 8);
    }
  }
  write_file_atomic(out_path, bytes.data(), bytes.size());
  const nlohmann::ordered_json meta = {{"format", "anelab-tokens"},
                                       {"version", 1},
                                       {"dtype", info.dtype},
                                       {"vocab_size", tok.vocab_size()},
                                       {"tokenizer", tokenizer_label},
                                       {"n_tokens", info.n_tokens},
                                       {"n_documents", info.n_documents},
                                       {"separator_id", info.separator_id}};
  write_file_atomic(out_path + ".json", meta.dump(1) + "\n");
  return info;
}

std::vector<int32_t> read_token_file(const std::string& path, TokenFileSource* source) {
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(read_file_text(path + ".json"));
  } catch (const nlohmann::json::exception& e) {
    fail("tokenize", path, ".json: malformed sidecar: ", e.what());
  }
  ANELAB_CHECK(meta.is_object() && meta.value("format", "") == "anelab-tokens" && meta.value("version", 0) == 1,
               "tokenize", path, ".json: not an anelab-tokens version 1 sidecar");
  const std::string dtype = meta.value("dtype", "");
  ANELAB_CHECK(dtype == "uint16" || dtype == "uint32", "tokenize", path, ".json: dtype '", dtype, "' unknown");
  const size_t w = dtype == "uint16" ? 2 : 4;
  if (source) {
    const auto& v = meta.contains("vocab_size") ? meta["vocab_size"] : nlohmann::json();
    ANELAB_CHECK(v.is_null() || (v.is_number_integer() && v.get<int64_t>() > 0), "tokenize", path, ".json: vocab_size ",
                 v.dump(), " is not a positive integer");
    source->vocab_size = v.is_null() ? 0 : v.get<int64_t>();
    source->tokenizer =
        meta.contains("tokenizer") && meta["tokenizer"].is_string() ? meta["tokenizer"].get<std::string>() : "";
    const auto& sep = meta.contains("separator_id") ? meta["separator_id"] : nlohmann::json();
    ANELAB_CHECK(sep.is_null() || (sep.is_number_integer() && sep.get<int64_t>() >= -1 &&
                                   sep.get<int64_t>() < (source->vocab_size ? source->vocab_size : INT32_MAX)),
                 "tokenize", path, ".json: separator_id ", sep.dump(), " is not -1 or a token id of the vocabulary");
    source->separator_id = sep.is_null() ? -1 : static_cast<int32_t>(sep.get<int64_t>());
  }
  const auto bytes = read_file_bytes(path);
  const int64_t n = meta.value("n_tokens", int64_t{-1});
  ANELAB_CHECK(bytes.size() % w == 0 && static_cast<int64_t>(bytes.size() / w) == n, "tokenize", path, ": ",
               bytes.size(), " bytes do not hold n_tokens=", n, " ", dtype, " ids");
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t v = 0;
    for (size_t k = 0; k < w; ++k) v |= static_cast<uint32_t>(bytes[i * w + k]) << (8 * k);
    ids[i] = static_cast<int32_t>(v);
  }
  return ids;
}

std::string encode_id_lines(const Tokenizer& tok, std::string_view text) {
  std::string out;
  const auto paras = split_paragraphs(text);
  for (size_t i = 0; i < paras.size(); ++i) {
    std::vector<int32_t> ids;
    try {
      ids = tok.encode(paras[i]);
    } catch (const Error& e) {
      fail("tokenize", "paragraph ", i + 1, " (byte ", paras[i].data() - text.data(), "): ", e.what());
    }
    for (size_t k = 0; k < ids.size(); ++k) {
      if (k) out.push_back(' ');
      out += std::to_string(ids[k]);
    }
    out.push_back('\n');
  }
  return out;
}

std::string decode_id_lines(const Tokenizer& tok, std::string_view id_text) {
  std::string out;
  size_t pos = 0, line_no = 0;
  std::vector<int32_t> ids;
  while (pos < id_text.size()) {
    size_t e = id_text.find('\n', pos);
    if (e == std::string_view::npos) e = id_text.size();
    std::string_view line = id_text.substr(pos, e - pos);
    pos = e + 1;
    ++line_no;
    ids.clear();
    size_t i = 0;
    while (i < line.size()) {
      if (line[i] == ' ' || line[i] == '\t' || line[i] == '\r') {
        ++i;
        continue;
      }
      int64_t v = 0;
      auto [p, ec] = std::from_chars(line.data() + i, line.data() + line.size(), v);
      ANELAB_CHECK(ec == std::errc() && v >= 0 && v < tok.vocab_size(), "tokenize", "line ", line_no, ": '",
                   line.substr(i, std::min<size_t>(20, line.size() - i)), "' is not a token id in [0, ",
                   tok.vocab_size(), ")");
      ids.push_back(static_cast<int32_t>(v));
      i = p - line.data();
    }
    out += tok.decode(ids);
    out += "\n\n";
  }
  return out;
}

}  // namespace anelab::tok
