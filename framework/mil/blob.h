// ANE weight blob files (the "DEADBEEF" format; ../shared/reference/ane_digest.md §3).
//
//   offset  size  field
//   0       64    file header: byte 0 = 0x01, byte 4 = 0x02, rest 0
//   then, per weight (chunk), with no padding between chunks:
//   +0      4     chunk magic, uint32 LE 0xDEADBEEF (bytes EF BE AD DE)
//   +4      1     0x01 (chunk flag/version)
//   +8      4     uint32 LE data_size: payload bytes
//   +16     4     uint32 LE data_offset: ABSOLUTE file offset of the payload (= chunk start + 64)
//   (other bytes of the 64-byte chunk header are 0)
//   +64     n     payload: fp16 (2 bytes/elt) or int8/uint8 (1 byte/elt), row-major
//
// MIL refers to a weight with BLOBFILE(path = "@model_path/weights/<file>", offset = <chunk start>):
// the offset points at the chunk header, not at the payload. The payload's element type and shape are
// given by the MIL const's type, not by the blob. Always fill data_size and data_offset (older chips
// validate them; digest §3.4).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "framework/core/fp16.h"
#include "framework/mil/types.h"

namespace anelab::mil {

constexpr uint32_t kBlobChunkMagic = 0xDEADBEEFu;
constexpr size_t kBlobFileHeader = 64;
constexpr size_t kBlobChunkHeader = 64;

class BlobWriter {
 public:
  BlobWriter();
  // Each add_* appends one chunk and returns its MIL offset (the chunk header's file offset).
  uint64_t add_fp16(std::span<const float> values);  // converted with round-to-nearest-even
  uint64_t add_fp16_bits(std::span<const half_bits> values);
  uint64_t add_int8(std::span<const int8_t> values);
  uint64_t add_uint8(std::span<const uint8_t> values);
  uint64_t add_raw(std::span<const uint8_t> payload);
  // Transposed fp16: writes W^T for a row-major [rows, cols] matrix (payload [cols, rows]).
  uint64_t add_fp16_transposed(std::span<const float> w, int64_t rows, int64_t cols);

  const std::vector<uint8_t>& bytes() const { return buf_; }
  std::vector<uint8_t> take() { return std::move(buf_); }
  size_t chunks() const { return chunks_; }

 private:
  uint8_t* append_chunk(size_t payload_bytes, uint64_t* offset);
  std::vector<uint8_t> buf_;
  size_t chunks_ = 0;
};

struct BlobChunk {
  uint64_t offset = 0;       // chunk header offset (the MIL BLOBFILE offset)
  uint64_t data_offset = 0;  // absolute payload offset
  uint32_t data_size = 0;    // payload bytes
};

// Read-only view of a blob file. Validates the file header on construction and each chunk on access;
// errors are anelab::Error("[blob] <name>: ...") naming the offset and field.
class BlobReader {
 public:
  BlobReader(std::span<const uint8_t> bytes, std::string name);
  // The chunk whose header is at `offset`.
  BlobChunk chunk_at(uint64_t offset) const;
  // All chunks, walking headers from offset 64 until the end of the file.
  std::vector<BlobChunk> chunks() const;
  // Payload for a MIL const of `type` at BLOBFILE offset `offset`; checks data_size == numel*elt bytes.
  std::span<const uint8_t> payload(uint64_t offset, const TensorType& type) const;
  // Decoded fp32 values of a payload of dtype fp16/fp32/int8/uint8.
  std::vector<float> read_f32(uint64_t offset, const TensorType& type) const;

 private:
  std::span<const uint8_t> bytes_;
  std::string name_;
};

}  // namespace anelab::mil
