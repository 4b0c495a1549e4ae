#include "framework/mil/blob.h"

#include <cstring>

#include "framework/core/error.h"

namespace anelab::mil {

namespace {
void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | p[i];
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}
size_t align_up(size_t v) { return (v + kBlobAlignment - 1) / kBlobAlignment * kBlobAlignment; }
const char* blob_dtype_name(uint32_t d) {
  switch (d) {
    case 1:
      return "Float16";
    case 2:
      return "Float32";
    case 3:
      return "UInt8";
    case 4:
      return "Int8";
    case 11:
      return "UInt4";
    default:
      return "unknown";
  }
}
}  // namespace

BlobDType blob_dtype_for(DType t) {
  switch (t) {
    case DType::kFp16:
      return BlobDType::kFloat16;
    case DType::kFp32:
      return BlobDType::kFloat32;
    case DType::kUint8:
      return BlobDType::kUInt8;
    case DType::kInt8:
      return BlobDType::kInt8;
    case DType::kUint4:
      return BlobDType::kUInt4;
    case DType::kUint6:
      return BlobDType::kUInt6;
    default:
      fail("blob", "no MIL blob data type for ", dtype_name(t),
           " (blobs here store fp16, fp32, uint8, int8, uint4, uint6)");
  }
}

size_t blob_payload_bytes(DType t, int64_t count) {
  const auto n = static_cast<size_t>(count);
  if (t == DType::kUint4) return (n + 1) / 2;
  if (t == DType::kUint6) return (n * 6 + 7) / 8;
  return n * dtype_bytes(t);
}

std::vector<uint8_t> pack_uint4(std::span<const uint8_t> values) {
  std::vector<uint8_t> out((values.size() + 1) / 2, 0);
  for (size_t i = 0; i < values.size(); ++i) {
    ANELAB_CHECK(values[i] < 16, "blob", "uint4 value ", static_cast<int>(values[i]), " at index ", i,
                 " does not fit in 4 bits");
    out[i / 2] |= static_cast<uint8_t>(values[i] << (4 * (i % 2)));
  }
  return out;
}

std::vector<uint8_t> pack_uint6(std::span<const uint8_t> values) {
  std::vector<uint8_t> out((values.size() * 6 + 7) / 8, 0);
  for (size_t i = 0; i < values.size(); ++i) {
    ANELAB_CHECK(values[i] < 64, "blob", "uint6 value ", static_cast<int>(values[i]), " at index ", i,
                 " does not fit in 6 bits");
    const size_t bit = i * 6, byte = bit / 8, shift = bit % 8;
    out[byte] |= static_cast<uint8_t>(values[i] << shift);
    if (shift > 2) out[byte + 1] |= static_cast<uint8_t>(values[i] >> (8 - shift));
  }
  return out;
}

uint8_t unpack_uint6(std::span<const uint8_t> packed, size_t i) {
  const size_t bit = i * 6, byte = bit / 8, shift = bit % 8;
  unsigned v = packed[byte] >> shift;
  if (shift > 2) v |= static_cast<unsigned>(packed[byte + 1]) << (8 - shift);
  return static_cast<uint8_t>(v & 63);
}

BlobWriter::BlobWriter() : buf_(kBlobFileHeader, 0) {
  put_u32(buf_.data() + 0, 0);  // count, updated by every chunk
  put_u32(buf_.data() + 4, kBlobVersion);
}

uint8_t* BlobWriter::append_chunk(size_t payload_bytes, BlobDType dtype, uint64_t* offset) {
  const size_t start = align_up(buf_.size());  // zero padding up to the next multiple of 64
  buf_.resize(start + kBlobChunkHeader + payload_bytes, 0);
  uint8_t* h = buf_.data() + start;
  put_u32(h + 0, kBlobChunkMagic);
  put_u32(h + 4, static_cast<uint32_t>(dtype));
  put_u64(h + 8, payload_bytes);
  put_u64(h + 16, start + kBlobChunkHeader);
  ++chunks_;
  put_u32(buf_.data(), static_cast<uint32_t>(chunks_));
  *offset = start;
  return h + kBlobChunkHeader;
}

uint64_t BlobWriter::add_fp16(std::span<const float> values) {
  uint64_t off;
  uint8_t* p = append_chunk(values.size() * 2, BlobDType::kFloat16, &off);
  std::vector<half_bits> tmp(values.size());
  float_to_half(values.data(), tmp.data(), values.size());
  std::memcpy(p, tmp.data(), values.size() * 2);
  return off;
}

uint64_t BlobWriter::add_fp16_bits(std::span<const half_bits> values) {
  uint64_t off;
  uint8_t* p = append_chunk(values.size() * 2, BlobDType::kFloat16, &off);
  std::memcpy(p, values.data(), values.size() * 2);
  return off;
}

uint64_t BlobWriter::add_int8(std::span<const int8_t> values) {
  uint64_t off;
  uint8_t* p = append_chunk(values.size(), BlobDType::kInt8, &off);
  std::memcpy(p, values.data(), values.size());
  return off;
}

uint64_t BlobWriter::add_uint8(std::span<const uint8_t> values) { return add_raw(values, BlobDType::kUInt8); }

uint64_t BlobWriter::add_uint4(std::span<const uint8_t> values) {
  return add_raw(pack_uint4(values), BlobDType::kUInt4);
}

uint64_t BlobWriter::add_uint6(std::span<const uint8_t> values) {
  return add_raw(pack_uint6(values), BlobDType::kUInt6);
}

uint64_t BlobWriter::add_raw(std::span<const uint8_t> payload, BlobDType dtype) {
  uint64_t off;
  uint8_t* p = append_chunk(payload.size(), dtype, &off);
  if (!payload.empty()) std::memcpy(p, payload.data(), payload.size());
  return off;
}

uint64_t BlobWriter::add_fp16_transposed(std::span<const float> w, int64_t rows, int64_t cols) {
  ANELAB_CHECK(static_cast<int64_t>(w.size()) == rows * cols, "blob", "transposed weight: ", w.size(),
               " values for a [", rows, ", ", cols, "] matrix");
  std::vector<float> t(w.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = w[i * cols + j];
  return add_fp16(t);
}

BlobReader::BlobReader(std::span<const uint8_t> bytes, std::string name) : bytes_(bytes), name_(std::move(name)) {
  ANELAB_CHECK(bytes_.size() >= kBlobFileHeader, "blob", name_, ": file is ", bytes_.size(),
               " bytes, shorter than the 64-byte file header");
  const uint32_t version = get_u32(bytes_.data() + 4);
  ANELAB_CHECK(version == kBlobVersion, "blob", name_, ": storage header version is ", version, ", expected ",
               kBlobVersion, " (MIL blob storage format)");
  count_ = get_u32(bytes_.data());
  ANELAB_CHECK(count_ >= 1, "blob", name_, ": storage header count is 0 (no blobs in the file)");
}

BlobChunk BlobReader::chunk_at(uint64_t offset) const {
  ANELAB_CHECK(offset >= kBlobFileHeader, "blob", name_, ": offset ", offset,
               " points into the 64-byte file header (BLOBFILE offsets point at a chunk header)");
  ANELAB_CHECK(offset <= bytes_.size() && bytes_.size() - offset >= kBlobChunkHeader, "blob", name_,
               ": chunk header at offset ", offset, " runs past the end of the ", bytes_.size(), "-byte file");
  const uint8_t* h = bytes_.data() + offset;
  uint32_t magic = get_u32(h);
  ANELAB_CHECK(magic == kBlobChunkMagic, "blob", name_, ": no chunk magic 0xDEADBEEF at offset ", offset,
               " (BLOBFILE offsets must point at the chunk header, not the payload)");
  ANELAB_CHECK(offset % kBlobAlignment == 0, "blob", name_, ": chunk offset ", offset, " is not a multiple of ",
               kBlobAlignment, " (blob metadata is 64-byte aligned)");
  BlobChunk c;
  c.offset = offset;
  c.dtype = get_u32(h + 4);
  c.data_size = get_u64(h + 8);
  c.data_offset = get_u64(h + 16);
  ANELAB_CHECK(c.data_offset >= offset + kBlobChunkHeader, "blob", name_, ": chunk at ", offset, " has data_offset ",
               c.data_offset, " inside its own header (expected ", offset + kBlobChunkHeader, ")");
  ANELAB_CHECK(c.data_offset <= bytes_.size() && c.data_size <= bytes_.size() - c.data_offset, "blob", name_,
               ": chunk at ", offset, " payload [", c.data_offset, ", +", c.data_size, ") runs past the end of the ",
               bytes_.size(), "-byte file");
  return c;
}

std::vector<BlobChunk> BlobReader::chunks() const {
  std::vector<BlobChunk> out;
  uint64_t off = kBlobFileHeader;
  for (uint32_t i = 0; i < count_; ++i) {
    BlobChunk c = chunk_at(off);
    out.push_back(c);
    off = align_up(c.data_offset + c.data_size);
  }
  return out;
}

std::span<const uint8_t> BlobReader::payload(uint64_t offset, const TensorType& type) const {
  BlobChunk c = chunk_at(offset);
  size_t want = blob_payload_bytes(type.dtype, type.numel());
  ANELAB_CHECK(c.data_size == want, "blob", name_, ": chunk at offset ", offset, " holds ", c.data_size,
               " bytes but the MIL const ", type.str(), " needs ", want);
  const auto expect = static_cast<uint32_t>(blob_dtype_for(type.dtype));
  ANELAB_CHECK(c.dtype == expect, "blob", name_, ": chunk at offset ", offset, " has data type ",
               blob_dtype_name(c.dtype), " (", c.dtype, ") but the MIL const ", type.str(), " needs ",
               blob_dtype_name(expect), " (", expect, ")");
  return bytes_.subspan(c.data_offset, c.data_size);
}

std::vector<float> BlobReader::read_f32(uint64_t offset, const TensorType& type) const {
  auto p = payload(offset, type);
  size_t n = static_cast<size_t>(type.numel());
  std::vector<float> out(n);
  if (n == 0) return out;  // an empty const: no payload to copy
  switch (type.dtype) {
    case DType::kFp16: {
      std::vector<half_bits> h(n);
      std::memcpy(h.data(), p.data(), n * 2);
      half_to_float(h.data(), out.data(), n);
      break;
    }
    case DType::kFp32:
      std::memcpy(out.data(), p.data(), n * 4);
      break;
    case DType::kInt8:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<int8_t>(p[i]);
      break;
    case DType::kUint8:
      for (size_t i = 0; i < n; ++i) out[i] = p[i];
      break;
    case DType::kUint4:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>((p[i / 2] >> (4 * (i % 2))) & 0xF);
      break;
    case DType::kUint6:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(unpack_uint6(p, i));
      break;
    default:
      fail("blob", name_, ": cannot decode a ", type.str(), " payload");
  }
  return out;
}

}  // namespace anelab::mil
