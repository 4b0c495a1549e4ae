// The ANE weight-blob format: byte-exact layout (digest §3.1/3.2), multi-chunk files, int8 payloads,
// and rejection of corrupt files.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "framework/core/error.h"
#include "framework/core/fp16.h"
#include "framework/mil/blob.h"

namespace anelab::mil {
namespace {

uint32_t u32(const std::vector<uint8_t>& b, size_t off) {
  uint32_t v;
  std::memcpy(&v, b.data() + off, 4);
  return v;
}

TEST(Blob, SingleFp16ChunkLayoutIsByteExact) {
  BlobWriter w;
  std::vector<float> vals = {1.0f, -2.0f, 0.5f, 65504.0f};
  uint64_t off = w.add_fp16(vals);
  const auto& b = w.bytes();
  EXPECT_EQ(off, 64u);
  ASSERT_EQ(b.size(), 128u + 8u);  // 64 storage header + 64 metadata + 4 fp16
  EXPECT_EQ(u32(b, 0), 1u);        // count
  EXPECT_EQ(u32(b, 4), 2u);        // version
  for (size_t i = 8; i < 64; ++i) EXPECT_EQ(b[i], 0) << i;
  EXPECT_EQ(b[64], 0xEF);
  EXPECT_EQ(b[65], 0xBE);
  EXPECT_EQ(b[66], 0xAD);
  EXPECT_EQ(b[67], 0xDE);
  EXPECT_EQ(u32(b, 68), 1u);  // mil_dtype Float16
  EXPECT_EQ(u32(b, 72), 8u);  // sizeInBytes (uint64)
  EXPECT_EQ(u32(b, 76), 0u);
  EXPECT_EQ(u32(b, 80), 128u);  // absolute payload offset (uint64)
  for (size_t i = 84; i < 128; ++i) EXPECT_EQ(b[i], 0) << i;
  // fp16 bit patterns: 1.0 = 0x3C00, -2.0 = 0xC000, 0.5 = 0x3800, 65504 = 0x7BFF
  const uint16_t expect[] = {0x3C00, 0xC000, 0x3800, 0x7BFF};
  for (int i = 0; i < 4; ++i) {
    uint16_t h;
    std::memcpy(&h, b.data() + 128 + 2 * i, 2);
    EXPECT_EQ(h, expect[i]);
  }
}

// Issue 40 item 5: an independent writer of coremltools' StorageFormat.hpp structs, as its
// StorageWriter::WriteData lays them out: storage_header {count, version = 2, 7 reserved uint64},
// then per blob, at the next 64-byte-aligned offset, blob_metadata {sentinel, mil_dtype,
// sizeInBytes, offset, 5 reserved uint64} and the raw data.
struct RefStorageHeader {
  uint32_t count = 0, version = 2;
  uint64_t reserved[7] = {};
};
struct RefBlobMetadata {
  uint32_t sentinel = 0xDEADBEEF, mil_dtype = 0;
  uint64_t size_in_bytes = 0, offset = 0;
  uint64_t reserved[5] = {};
};
static_assert(sizeof(RefStorageHeader) == 64 && sizeof(RefBlobMetadata) == 64);
struct RefWriter {
  std::vector<uint8_t> file = std::vector<uint8_t>(64, 0);
  RefStorageHeader header;
  uint64_t write(uint32_t dtype, const void* data, size_t n) {
    const size_t meta_at = (file.size() + 63) / 64 * 64;
    RefBlobMetadata m;
    m.mil_dtype = dtype, m.size_in_bytes = n, m.offset = meta_at + 64;
    file.resize(meta_at + 64 + n, 0);
    std::memcpy(file.data() + meta_at, &m, 64);  // little-endian host, as the tests run on
    if (n) std::memcpy(file.data() + meta_at + 64, data, n);
    ++header.count;
    std::memcpy(file.data(), &header, 64);
    return meta_at;
  }
};

TEST(Blob, ByteIdenticalToTheMilBlobStorageWriterForFp16AndInt8) {
  std::vector<float> q(5), k(7);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i) * 0.25f;
  for (size_t i = 0; i < k.size(); ++i) k[i] = -static_cast<float>(i);
  const std::vector<int8_t> qi = {-128, -1, 0, 1, 127};
  BlobWriter w;
  const uint64_t o1 = w.add_fp16(q), o2 = w.add_int8(qi), o3 = w.add_fp16(k);
  RefWriter ref;
  std::vector<half_bits> hq(q.size()), hk(k.size());
  float_to_half(q.data(), hq.data(), q.size());
  float_to_half(k.data(), hk.data(), k.size());
  EXPECT_EQ(o1, ref.write(1, hq.data(), hq.size() * 2));
  EXPECT_EQ(o2, ref.write(4, qi.data(), qi.size()));  // Int8 = 4, not Float16
  EXPECT_EQ(o3, ref.write(1, hk.data(), hk.size() * 2));
  EXPECT_EQ(w.bytes(), ref.file);
  EXPECT_EQ(o2 % 64, 0u);  // 64-byte aligned entries, not back to back
  EXPECT_EQ(o3 % 64, 0u);
  EXPECT_EQ(u32(w.bytes(), 0), 3u);  // the count of blobs
}

TEST(Blob, SeveralChunksOffsetsAndReadBack) {
  BlobWriter w;
  std::vector<float> q(6), k(6);
  for (int i = 0; i < 6; ++i) q[i] = static_cast<float>(i), k[i] = -static_cast<float>(i);
  std::vector<int8_t> qi = {-128, -1, 0, 1, 127};
  uint64_t o1 = w.add_fp16(q), o2 = w.add_fp16(k), o3 = w.add_int8(qi);
  EXPECT_EQ(o1, 64u);
  EXPECT_EQ(o2, 192u);  // 64 + 64 + 12 rounded up to 64
  EXPECT_EQ(o3, 320u);
  auto bytes = w.take();
  EXPECT_EQ(u32(bytes, static_cast<size_t>(o2) + 16), o2 + 64);
  BlobReader r(bytes, "w.bin");
  auto chunks = r.chunks();
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[2].data_size, 5u);
  EXPECT_EQ(chunks[2].dtype, 4u);
  EXPECT_EQ(r.read_f32(o2, tensor_type(DType::kFp16, {2, 3})), k);
  auto iv = r.read_f32(o3, tensor_type(DType::kInt8, {5}));
  EXPECT_EQ(iv, (std::vector<float>{-128, -1, 0, 1, 127}));
  // The data type is checked against the const: int8 bytes read as uint8 are refused.
  try {
    r.payload(o3, tensor_type(DType::kUint8, {5}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data type Int8 (4)"), std::string::npos) << e.what();
  }
}

TEST(Blob, TransposedWeights) {
  BlobWriter w;
  std::vector<float> m = {1, 2, 3, 4, 5, 6};  // [2, 3]
  uint64_t off = w.add_fp16_transposed(m, 2, 3);
  BlobReader r(w.bytes(), "t.bin");
  EXPECT_EQ(r.read_f32(off, tensor_type(DType::kFp16, {3, 2})), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Blob, Uint4ChunkIsPackedLowNibbleFirstWithDataType11) {
  // MILBlob UInt4 (BlobDataType 11): element 2k in the low nibble of byte k, element 2k+1 in the high one; an
  // odd count leaves the last high nibble 0. Reference bytes written by hand from that definition.
  BlobWriter w;
  const std::vector<uint8_t> vals = {0x1, 0xA, 0xF, 0x0, 0x7};
  uint64_t off = w.add_uint4(vals);
  const auto& b = w.bytes();
  ASSERT_EQ(b.size(), 128u + 3u);
  EXPECT_EQ(u32(b, off + 4), 11u);  // mil_dtype UInt4
  EXPECT_EQ(u32(b, off + 8), 3u);   // sizeInBytes = ceil(5 / 2)
  EXPECT_EQ(b[128], 0xA1);
  EXPECT_EQ(b[129], 0x0F);
  EXPECT_EQ(b[130], 0x07);
  BlobReader r(b, "u4.bin");
  EXPECT_EQ(r.read_f32(off, tensor_type(DType::kUint4, {5})), (std::vector<float>{1, 10, 15, 0, 7}));
  // The byte count is the packed one: a uint4 [7] const needs 4 bytes, the chunk holds 3.
  EXPECT_THROW(r.read_f32(off, tensor_type(DType::kUint4, {7})), Error);
  // A 16 cannot be stored in 4 bits.
  const std::vector<uint8_t> bad = {16};
  EXPECT_THROW(w.add_uint4(bad), Error);
}

TEST(Blob, CorruptFilesAreRejected) {
  BlobWriter w;
  std::vector<float> v(16, 1.0f);
  uint64_t off = w.add_fp16(v);
  auto good = w.take();
  TensorType t = tensor_type(DType::kFp16, {16});
  // Offset pointing at the payload instead of the chunk header (a bug seen in the probes).
  {
    BlobReader r(good, "g.bin");
    EXPECT_THROW(r.payload(off + 64, t), Error);
    EXPECT_THROW(r.payload(off, tensor_type(DType::kFp16, {8})), Error);  // data_size mismatch
    EXPECT_THROW(r.payload(0, t), Error);                                 // file header
    EXPECT_THROW(r.payload(1 << 20, t), Error);                           // past EOF
  }
  for (size_t len = 0; len < good.size(); ++len) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<long>(len));
    EXPECT_THROW(
        {
          BlobReader r(cut, "cut.bin");
          r.payload(off, t);
        },
        Error)
        << len;
  }
  auto bad = good;
  bad[64] = 0;  // magic
  EXPECT_THROW(BlobReader(bad, "b.bin").payload(off, t), Error);
  bad = good;
  bad[72 + 2] = 0x08;  // the probes' hard-coded data_size (524288)
  EXPECT_THROW(BlobReader(bad, "b.bin").payload(off, t), Error);
  bad = good;
  bad[68] = 4;  // Int8 data type under an fp16 const
  EXPECT_THROW(BlobReader(bad, "b.bin").payload(off, t), Error);
  bad = good;
  bad[4] = 1;  // version 1 (Espresso blob_v1)
  EXPECT_THROW(BlobReader(bad, "b.bin").payload(off, t), Error);
  bad = good;
  bad[0] = 0;  // count 0
  EXPECT_THROW(BlobReader(bad, "b.bin").payload(off, t), Error);
  bad = good;
  bad[80] = 10;  // data_offset inside the header
  EXPECT_THROW(BlobReader(bad, "b.bin").payload(off, t), Error);
  // Random garbage never crashes.
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    auto g = good;
    g[rng() % g.size()] = static_cast<uint8_t>(rng());
    try {
      BlobReader r(g, "fuzz.bin");
      r.chunks();
      r.payload(off, t);
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace anelab::mil
