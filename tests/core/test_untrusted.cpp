// quote_untrusted (framework/core/untrusted.h): what a terminal could act on is escaped, printable text
// (UTF-8 included) is kept, and the result is the same when escaped again.
#include <gtest/gtest.h>

#include <string>

#include "framework/core/error.h"
#include "framework/core/untrusted.h"

namespace anelab {
namespace {

TEST(QuoteUntrusted, PrintableTextIsKept) {
  for (const std::string s : {"", "layers.0.wq", "a b\\c", "caf\xc3\xa9", "\xe2\x96\x81token", "\xf0\x9f\x98\x80"})
    EXPECT_EQ(quote_untrusted(s), s) << s;
}

TEST(QuoteUntrusted, TerminalSequencesAreEscaped) {
  // OSC 0 (window title) ended by BEL, then SGR red: the attack of issue 34 in a tensor name.
  EXPECT_EQ(quote_untrusted("x\x1b]0;title\x07\x1b[31my"), "x\\x1b]0;title\\x07\\x1b[31my");
  EXPECT_EQ(quote_untrusted(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(quote_untrusted("\x7f"), "\\x7f");
  EXPECT_EQ(quote_untrusted("a\nb\tc\rd"), "a\\x0ab\\x09c\\x0dd");
  EXPECT_EQ(quote_untrusted("a\nb\tc\rd", true), "a\nb\tc\\x0dd");  // whole messages keep their lines
  EXPECT_EQ(quote_untrusted("\xc2\x9b"
                            "31m"),
            "\\u{009b}31m");                            // C1 CSI, as UTF-8
  EXPECT_EQ(quote_untrusted("\xc2\x85"), "\\u{0085}");  // C1 NEL
  EXPECT_EQ(quote_untrusted("\xe2\x80\xae"
                            "abc"),
            "\\u{202e}abc");                                // right-to-left override
  EXPECT_EQ(quote_untrusted("\xe2\x81\xa6"), "\\u{2066}");  // left-to-right isolate
}

TEST(QuoteUntrusted, InvalidUtf8IsEscapedBytewise) {
  EXPECT_EQ(quote_untrusted("\x9b"), "\\x9b");                             // a raw C1 byte (8-bit CSI)
  EXPECT_EQ(quote_untrusted("a\x80z"), "a\\x80z");                         // stray continuation byte
  EXPECT_EQ(quote_untrusted("\xc3"), "\\xc3");                             // truncated at the end
  EXPECT_EQ(quote_untrusted("\xc3(x"), "\\xc3(x");                         // bad continuation
  EXPECT_EQ(quote_untrusted("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(quote_untrusted("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");           // overlong, 3 bytes
  EXPECT_EQ(quote_untrusted("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // UTF-16 surrogate
  EXPECT_EQ(quote_untrusted("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  EXPECT_EQ(quote_untrusted("\xff\xfe"), "\\xff\\xfe");
}

TEST(QuoteUntrusted, EscapingTwiceChangesNothing) {
  // Every byte value alone and in pairs: the output holds nothing a second pass would change.
  for (int a = 0; a < 256; ++a)
    for (int b = 0; b < 256; b += 17) {
      const std::string s{static_cast<char>(a), static_cast<char>(b), '\xc2', static_cast<char>(a)};
      const std::string once = quote_untrusted(s);
      EXPECT_EQ(quote_untrusted(once), once) << a << " " << b;
      for (unsigned char c : once) EXPECT_FALSE(c < 0x20 || c == 0x7f) << a << " " << b;
    }
}

TEST(QuoteUntrusted, ErrorMessagesAreStoredEscaped) {
  // A reader's message quoting a tensor name: whoever prints what() prints no control sequence.
  try {
    fail("model", "f.gguf: tensor ", "x\x1b]0;t\x07\x1b[31m", " is odd\nsecond line");
    FAIL() << "fail() returned";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[model] f.gguf: tensor x\\x1b]0;t\\x07\\x1b[31m is odd\nsecond line");
  }
}

}  // namespace
}  // namespace anelab
