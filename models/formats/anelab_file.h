// The anelab model file (.anelab), format version 5, or 6 when it holds palettes (versions 1 to 4 are still read).
// Version 3 added the dtypes q4_0, q5_0, q4_k and q6_k, version 4 q5_1 and q5_k, version 5 the header and data
// checksums (as the training checkpoint has them), version 6 the palettes section: every file is now written as
// version 5, or 6 when the model has palettes (Model::palettes). All integers little-endian. A model file
// is self-contained: the tokenizer is embedded (as GGUF does), with the chat template when the source had one.
//
//   offset 0   char[8]  magic "ANELABMF"
//   offset 8   u32      format version (5 or 6; readers accept 1 to 6)
//   offset 12  u32      reserved (0)
//   offset 16  u64      header_len: length of the JSON header that follows (at most 64 MiB)
//   versions 5 and 6:
//   offset 24  u64      header checksum: FNV-1a 64 of the header_len JSON bytes (checked before they are parsed)
//   offset 32  u64      data checksum of the whole data section, padding included: FNV-1a 64 over the u64
//                       FNV-1a 64 digests of its consecutive 1 MiB blocks (the last one shorter), so a reader
//                       checks the blocks on several threads
//   offset 24 (versions 1-4) or 40 (versions 5, 6): JSON header, UTF-8, header_len bytes
//   zero padding up to data_offset = round_up(JSON offset + header_len, 64)
//   data section: data_size bytes; every blob starts at data_offset + offset, offset % 64 == 0,
//   so tensor data is 64-byte aligned when the file is mapped or read into (2 MiB-aligned) memory. The file
//   ends there exactly.
//
// JSON header:
//   {"format": "anelab-model", "version": the binary version,
//    "config": the model config, every field (models/formats/model_config_json.h),
//    "tokenizer": {"path": "where it came from (provenance only when embedded; may be empty)",
//                  "embedded": {"offset": O, "nbytes": N},       (optional: absent when the model has none)
//                  "chat_template": "Jinja text"}                (optional; version 2)
//    "tensors": [{"name": canonical name (models/formats/model.h), "dtype": "fp32"|"fp16"|"bf16"|"q8_0"|
//                 "q4_0"|"q5_0"|"q5_1"|"q4_k"|"q5_k"|"q6_k" (block layouts of framework/quant/blocks.h, whole blocks
//                 per row), "shape": [out, in] or [n], "offset": O, "nbytes": N}, ...],   canonical order
//    "palettes": [{"name": a tensor above (2-D, fp16 or fp32), "bits": 4 | 6, "group": rows per table (divides the
//                  tensor's rows), "indices": {"offset": O, "nbytes": rows * cols} (one u8 per element, row-major,
//                  each < 2^bits), "lut": {"offset": O, "nbytes": rows / group * 2^bits * 2} (fp16 tables)}, ...],
//                 (optional; version 6: framework/quant/palette.h. The tensor holds exactly lut[r / group][index] of
//                 each element, checked on load, so a reader that ignores the palettes computes on the same numbers)
//    "data_size": bytes of the data section,
//    "source": free-form provenance string}
//
// Embedded tokenizer blob (serialised tok::VocabData):
//   char[8] "ANETOK01"; u32 kind (0 sentencepiece, 1 byte_bpe); str pre; str pre_regex;
//   u8 flags (1 nfc_normalize, 2 add_bos, 4 add_space_prefix); i32 bos, eos, unk, pad;
//   u32 n, n x str tokens; u32 n, n x f32 scores; u32 n, n x i32 types; u32 n, n x str merges.
//   str = u32 length + bytes (no terminator).
//
// Loading checks the checksums (versions 5, 6) and validates every field (names it in the error); whether the
// tensors are the ones the config's architecture needs is the loader's check above (check_complete,
// models/arch/tensors.h). Writing streams tensor by tensor into PATH.tmp.<pid>, fsyncs, renames.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/core/file.h"
#include "models/formats/model.h"

namespace anelab::models {

constexpr char kAnelabMagic[9] = "ANELABMF";
constexpr uint32_t kAnelabVersion = 5;         // the version written for a model without palettes; 1 to 4 are read
constexpr uint32_t kAnelabPaletteVersion = 6;  // the version written with palettes; the newest read
// The first format version that holds dtype t: 3 for q4_0, q5_0, q4_k, q6_k; 4 for q5_1, q5_k; 1 otherwise.
uint32_t dtype_min_version(DType t);
constexpr int64_t kAnelabAlign = 64;

// Reads an anelab model file (mapped, or read into memory per `access`). Throws anelab::Error naming the field on
// any problem.
Model read_anelab_file(const std::string& path, FileAccess access = FileAccess::kMap);
// Parses an anelab file image held in memory (owner keeps the bytes alive; tensors point into them).
Model parse_anelab(const uint8_t* data, size_t size, std::shared_ptr<const void> owner, const std::string& where);
bool looks_like_anelab(const uint8_t* data, size_t size);

// Progress callback: (bytes written so far, total bytes).
using ProgressFn = std::function<void(int64_t, int64_t)>;

// Streaming writer input: the tensor list plus a way to produce each tensor's contents.
struct TensorWriteSpec {
  std::string name;
  DType dtype;  // dtype stored in the file
  std::vector<int64_t> shape;
  // Either raw bytes already in `dtype` (copied as-is) ...
  const uint8_t* raw = nullptr;
  // ... or a generator of fp32 values for elements [begin, begin + count) (converted to dtype).
  std::function<void(int64_t begin, int64_t count, float* out)> fill;
};

struct AnelabWriteInfo {
  ModelConfig config;
  const tok::VocabData* vocab = nullptr;  // embedded when non-null
  std::string tokenizer_path;
  std::string chat_template;
  std::string source;
  const std::map<std::string, std::shared_ptr<const quant::Palette>>* palettes = nullptr;  // by tensor name
};

// Writes the file atomically; returns the file size.
int64_t write_anelab_file(const std::string& path, const AnelabWriteInfo& info,
                          const std::vector<TensorWriteSpec>& tensors, const ProgressFn& progress = {});

// The dtype a tensor of this shape gets when saved with a target dtype (save_model, models/io/export.h; src = the
// tensor's current dtype): 1-D tensors fp32, rows not a multiple of the target's block fp16.
DType stored_dtype(DType src, const std::vector<int64_t>& shape, std::optional<DType> target);

std::vector<uint8_t> serialize_vocab(const tok::VocabData& v);
tok::VocabData deserialize_vocab(const uint8_t* data, size_t size, const std::string& where);

// libFuzzer-style entry point: parses arbitrary bytes as an anelab file; never crashes, returns 0.
int fuzz_read_anelab(const uint8_t* data, size_t size);

}  // namespace anelab::models
