// Fuzz targets over the framework's files: .npy arrays (`anelab mil run --in`), ANE weight blobs and MIL text.
#include <cstdlib>
#include <cstring>
#include <span>
#include <string_view>

#include "framework/core/npy.h"
#include "framework/mil/blob.h"
#include "framework/mil/parser.h"
#include "framework/mil/printer.h"
#include "tests/fuzz/targets.h"

namespace anelab::fuzz {

int run_npy(const uint8_t* data, size_t size) {
  return accepted([&] { parse_npy(data, size, "<fuzz>.npy"); });
}

// Every chunk is decoded (fp16 when its size is even, else uint8), and the chunk header at the offset in
// bytes 56..63 of the file header (zero in real files: then none) is read, as a BLOBFILE offset from MIL
// would be.
int run_mil_blob(const uint8_t* data, size_t size) {
  return accepted([&] {
    const mil::BlobReader r(std::span<const uint8_t>(data, size), "<fuzz>.bin");
    for (const mil::BlobChunk& c : r.chunks()) {
      const bool half = c.data_size % 2 == 0;
      const mil::TensorType t = mil::tensor_type(half ? mil::DType::kFp16 : mil::DType::kUint8,
                                                 {static_cast<int64_t>(half ? c.data_size / 2 : c.data_size)});
      r.read_f32(c.offset, t);
    }
    uint64_t probe;
    std::memcpy(&probe, data + 56, 8);
    if (probe != 0) r.chunk_at(probe);
  });
}

// A program that parses (and passes the checker) prints to text that parses again and prints the same;
// an error there is a finding, not a rejection.
int run_mil_text(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  mil::Program p;
  if (accepted([&] { p = mil::parse(text, "<fuzz>.mil"); })) return 1;
  const std::string once = mil::print(p);
  if (mil::print(mil::parse(once, "<fuzz printed>.mil")) != once) std::abort();
  return 0;
}

}  // namespace anelab::fuzz
