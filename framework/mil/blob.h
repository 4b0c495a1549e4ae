// ANE weight blob files: Apple's MIL blob storage format, version 2 (coremltools
// mlmodel/src/MILBlob/Blob/StorageFormat.hpp; ../shared/reference/ane_digest.md §3). All integers
// little-endian.
//
//   offset  size  field (storage_header, 64 bytes)
//   0       4     uint32 count: number of blobs in the file
//   4       4     uint32 version = 2
//   8       56    reserved, 0
//   then, per blob, its 64-byte metadata at the next multiple of 64 (zero padding before it):
//   +0      4     uint32 sentinel 0xDEADBEEF (bytes EF BE AD DE)
//   +4      4     uint32 mil_dtype: Float16 = 1, Float32 = 2, UInt8 = 3, Int8 = 4, UInt4 = 11 (BlobDataType)
//   +8      8     uint64 sizeInBytes: payload bytes
//   +16     8     uint64 offset: ABSOLUTE file offset of the payload (= metadata start + 64)
//   +24     40    reserved, 0
//   +64     n     payload, row-major; sub-byte types (UInt4) are packed, element i in bits
//                 [4*(i%2), 4*(i%2)+4) of byte i/2 (low nibble first), n = ceil(count/2)
//
// MIL refers to a weight with BLOBFILE(path = "@model_path/weights/<file>", offset = <metadata start>):
// the offset points at the metadata, not at the payload. A single fp16 blob is the layout every
// reference writes (count 1, dtype 1, metadata at 64, payload at 128); the writer here is byte-identical
// to coremltools' StorageWriter for fp16, fp32, uint8 and int8 blobs.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "framework/core/fp16.h"
#include "framework/mil/types.h"

namespace anelab::mil {

constexpr uint32_t kBlobChunkMagic = 0xDEADBEEFu;
constexpr uint32_t kBlobVersion = 2;
constexpr size_t kBlobFileHeader = 64;
constexpr size_t kBlobChunkHeader = 64;
constexpr size_t kBlobAlignment = 64;  // every metadata (and so every payload) starts at a multiple of it

// MILBlob's BlobDataType (values fixed by the format, coremltools MILBlob/Blob/BlobDataType.hpp).
enum class BlobDType : uint32_t {
  kFloat16 = 1,
  kFloat32 = 2,
  kUInt8 = 3,
  kInt8 = 4,
  kBFloat16 = 5,
  kInt16 = 6,
  kUInt16 = 7,
  kInt4 = 8,
  kUInt1 = 9,
  kUInt2 = 10,
  kUInt4 = 11,
  kUInt3 = 12,
  kUInt6 = 13,
  kInt32 = 14,
  kUInt32 = 15
};
// The blob data type that stores a MIL const of dtype `t`; throws for types the writer does not store.
BlobDType blob_dtype_for(DType t);
// Payload bytes of `count` elements of `t` in a blob (uint4: ceil(count / 2), uint6: ceil(6 count / 8), packed).
size_t blob_payload_bytes(DType t, int64_t count);
// Packs 4-bit values (each < 16, checked) low nibble first, as MILBlob stores UInt4.
std::vector<uint8_t> pack_uint4(std::span<const uint8_t> values);
// Packs 6-bit values (each < 64, checked) as MILBlob packs a sub-byte type that is not byte aligned
// (MILBlob/SubByteTypes.cpp): element i at bits [6i, 6i + 6) of the payload read as a little-endian bit stream, its
// low bits first, spilling into the next byte (the rule that puts uint4's element 0 in the low nibble).
std::vector<uint8_t> pack_uint6(std::span<const uint8_t> values);
uint8_t unpack_uint6(std::span<const uint8_t> packed, size_t i);  // element i of pack_uint6's bytes

class BlobWriter {
 public:
  BlobWriter();
  // Each add_* appends one chunk and returns its MIL offset (the chunk header's file offset).
  uint64_t add_fp16(std::span<const float> values);  // converted with round-to-nearest-even
  uint64_t add_fp16_bits(std::span<const half_bits> values);
  uint64_t add_int8(std::span<const int8_t> values);
  uint64_t add_uint8(std::span<const uint8_t> values);
  uint64_t add_uint4(std::span<const uint8_t> values);  // one value (0..15) per byte in, packed out
  uint64_t add_uint6(std::span<const uint8_t> values);  // one value (0..63) per byte in, packed (pack_uint6) out
  uint64_t add_raw(std::span<const uint8_t> payload, BlobDType dtype);
  // Transposed fp16: writes W^T for a row-major [rows, cols] matrix (payload [cols, rows]).
  uint64_t add_fp16_transposed(std::span<const float> w, int64_t rows, int64_t cols);

  const std::vector<uint8_t>& bytes() const { return buf_; }
  std::vector<uint8_t> take() { return std::move(buf_); }
  size_t chunks() const { return chunks_; }

 private:
  uint8_t* append_chunk(size_t payload_bytes, BlobDType dtype, uint64_t* offset);
  std::vector<uint8_t> buf_;
  size_t chunks_ = 0;
};

struct BlobChunk {
  uint64_t offset = 0;       // chunk header offset (the MIL BLOBFILE offset)
  uint64_t data_offset = 0;  // absolute payload offset
  uint64_t data_size = 0;    // payload bytes
  uint32_t dtype = 0;        // BlobDType code
};

// Read-only view of a blob file. Validates the file header on construction and each chunk on access;
// errors are anelab::Error("[blob] <name>: ...") naming the offset and field.
class BlobReader {
 public:
  BlobReader(std::span<const uint8_t> bytes, std::string name);
  // The chunk whose header is at `offset`.
  BlobChunk chunk_at(uint64_t offset) const;
  // All chunks: the header's count of them, each at the next multiple of 64 after the one before.
  std::vector<BlobChunk> chunks() const;
  // Payload for a MIL const of `type` at BLOBFILE offset `offset`; checks data_size == numel*elt bytes
  // and that the blob's data type is the const's.
  std::span<const uint8_t> payload(uint64_t offset, const TensorType& type) const;
  // Decoded fp32 values of a payload of dtype fp16/fp32/int8/uint8/uint4/uint6.
  std::vector<float> read_f32(uint64_t offset, const TensorType& type) const;

 private:
  std::span<const uint8_t> bytes_;
  std::string name_;
  uint32_t count_ = 0;  // storage_header count
};

}  // namespace anelab::mil
