// SHA-256 against the FIPS 180-4 example vectors and chunked updates.
#include <gtest/gtest.h>

#include "framework/core/sha256.h"

namespace anelab {
namespace {

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string million(1000000, 'a');
  EXPECT_EQ(sha256_hex(million), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, ChunkedUpdatesEqualOneShot) {
  std::string s;
  for (int i = 0; i < 1000; ++i) s += static_cast<char>(i * 7);
  Sha256 h;
  for (size_t i = 0; i < s.size(); i += 37) h.update(std::string_view(s).substr(i, 37));
  EXPECT_EQ(h.hex(), sha256_hex(s));
}

}  // namespace
}  // namespace anelab
