#include "framework/mil/blob.h"

#include <cstring>

#include "framework/core/error.h"

namespace anelab::mil {

namespace {
void put_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
uint32_t get_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
}  // namespace

BlobWriter::BlobWriter() : buf_(kBlobFileHeader, 0) {
  buf_[0] = 0x01;
  buf_[4] = 0x02;
}

uint8_t* BlobWriter::append_chunk(size_t payload_bytes, uint64_t* offset) {
  ANELAB_CHECK(payload_bytes <= 0xFFFFFFFFull, "blob", "payload of ", payload_bytes,
               " bytes exceeds the 32-bit data_size field");
  size_t start = buf_.size();
  ANELAB_CHECK(start + kBlobChunkHeader + payload_bytes <= 0xFFFFFFFFull, "blob",
               "blob file would exceed 4 GiB (32-bit data_offset); split the weights over several files");
  buf_.resize(start + kBlobChunkHeader + payload_bytes, 0);
  uint8_t* h = buf_.data() + start;
  put_u32(h + 0, kBlobChunkMagic);
  h[4] = 0x01;
  put_u32(h + 8, static_cast<uint32_t>(payload_bytes));
  put_u32(h + 16, static_cast<uint32_t>(start + kBlobChunkHeader));
  ++chunks_;
  *offset = start;
  return h + kBlobChunkHeader;
}

uint64_t BlobWriter::add_fp16(std::span<const float> values) {
  uint64_t off;
  uint8_t* p = append_chunk(values.size() * 2, &off);
  std::vector<half_bits> tmp(values.size());
  float_to_half(values.data(), tmp.data(), values.size());
  std::memcpy(p, tmp.data(), values.size() * 2);
  return off;
}

uint64_t BlobWriter::add_fp16_bits(std::span<const half_bits> values) {
  uint64_t off;
  uint8_t* p = append_chunk(values.size() * 2, &off);
  std::memcpy(p, values.data(), values.size() * 2);
  return off;
}

uint64_t BlobWriter::add_int8(std::span<const int8_t> values) {
  uint64_t off;
  uint8_t* p = append_chunk(values.size(), &off);
  std::memcpy(p, values.data(), values.size());
  return off;
}

uint64_t BlobWriter::add_uint8(std::span<const uint8_t> values) { return add_raw(values); }

uint64_t BlobWriter::add_raw(std::span<const uint8_t> payload) {
  uint64_t off;
  uint8_t* p = append_chunk(payload.size(), &off);
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
  ANELAB_CHECK(bytes_[0] == 0x01, "blob", name_, ": file header byte 0 is ", int(bytes_[0]), ", expected 1");
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
  BlobChunk c;
  c.offset = offset;
  c.data_size = get_u32(h + 8);
  c.data_offset = get_u32(h + 16);
  ANELAB_CHECK(c.data_offset >= offset + kBlobChunkHeader, "blob", name_, ": chunk at ", offset, " has data_offset ",
               c.data_offset, " inside its own header (expected ", offset + kBlobChunkHeader, ")");
  ANELAB_CHECK(c.data_offset + c.data_size <= bytes_.size(), "blob", name_, ": chunk at ", offset, " payload [",
               c.data_offset, ", +", c.data_size, ") runs past the end of the ", bytes_.size(), "-byte file");
  return c;
}

std::vector<BlobChunk> BlobReader::chunks() const {
  std::vector<BlobChunk> out;
  uint64_t off = kBlobFileHeader;
  while (off < bytes_.size()) {
    BlobChunk c = chunk_at(off);
    out.push_back(c);
    off = c.data_offset + c.data_size;
  }
  return out;
}

std::span<const uint8_t> BlobReader::payload(uint64_t offset, const TensorType& type) const {
  BlobChunk c = chunk_at(offset);
  size_t want = static_cast<size_t>(type.numel()) * dtype_bytes(type.dtype);
  ANELAB_CHECK(c.data_size == want, "blob", name_, ": chunk at offset ", offset, " holds ", c.data_size,
               " bytes but the MIL const ", type.str(), " needs ", want);
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
    default:
      fail("blob", name_, ": cannot decode a ", type.str(), " payload");
  }
  return out;
}

}  // namespace anelab::mil
