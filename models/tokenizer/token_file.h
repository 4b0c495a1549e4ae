// Text <-> token files, used by `anelab tokenize` (cli/tokenize_cmd.cpp).
//
// Paragraphs: the text is split at every "\n\n"; a final empty piece (text ending in "\n\n") is dropped.
// Paragraph text is kept byte-exact (no stripping: leading/trailing spaces and single "\n" stay, a "\n\n\n"
// gives a paragraph starting with "\n"). This is the layout of reference/tinystories_prefix_ids_*.txt.
//
// Token file (training data), format "anelab-tokens" version 1:
//   OUT.bin       flat little-endian token ids, uint16 when vocab_size <= 65536, else uint32; no header.
//                 Each paragraph (= story) is encoded on its own and preceded by one separator token:
//                 BOS when the vocab has one (llama2.c pretokenize: BOS per story), else "<|endoftext|>"
//                 when present, else EOS, else nothing. No EOS is appended.
//   OUT.bin.json  {"format":"anelab-tokens","version":1,"dtype":"uint16"|"uint32","vocab_size":N,
//                  "tokenizer":PATH,"n_tokens":N,"n_documents":N,"separator_id":ID|-1}
//   Both are written atomically (temp file + rename), the data file first.
//   With `whole` the text is not split: one document, the separator then the whole text's tokens ("\n\n"
//   kept as text), the stream `anelab perplexity` scores (llama-perplexity tokenizes a file so).
//
// Id text (--ids): one line per paragraph, ids separated by single spaces, no BOS/special tokens, every
// line ends with "\n" (an empty paragraph gives an empty line). decode_id_lines() is the inverse: each line
// is decoded and followed by "\n\n".
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "models/tokenizer/tokenizer.h"

namespace anelab::tok {

std::vector<std::string_view> split_paragraphs(std::string_view text);

struct TokenFileInfo {
  std::string dtype;  // "uint16" or "uint32"
  int64_t n_tokens = 0;
  int64_t n_documents = 0;
  int32_t separator_id = -1;
};

// The separator token used before each document (see above), or -1.
int32_t document_separator(const Tokenizer& tok);
// Encodes text into token ids per the layout above (ids of all documents, separators included).
std::vector<int32_t> encode_documents(const Tokenizer& tok, std::string_view text, int64_t* n_documents,
                                      bool whole = false);
// Writes OUT.bin + OUT.bin.json.
TokenFileInfo write_token_file(const Tokenizer& tok, std::string_view text, const std::string& out_path,
                               const std::string& tokenizer_label, bool whole = false);
// What a token file's sidecar says about the tokenizer that made it.
struct TokenFileSource {
  int64_t vocab_size = 0;     // the tokenizer's size (0: the sidecar does not say)
  std::string tokenizer;      // its path as written by `anelab tokenize` ("" when absent)
  int32_t separator_id = -1;  // the token before each document (-1: none, or the sidecar does not say)
};
// Reads a token file written by write_token_file (validates the sidecar and the size); `source` (when
// given) receives the sidecar's vocab_size, tokenizer and separator_id.
std::vector<int32_t> read_token_file(const std::string& path, TokenFileSource* source = nullptr);

std::string encode_id_lines(const Tokenizer& tok, std::string_view text);
std::string decode_id_lines(const Tokenizer& tok, std::string_view id_text);

}  // namespace anelab::tok
