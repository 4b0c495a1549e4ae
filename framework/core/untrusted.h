// Text that came from a file or a request (tensor names, metadata strings, tokenizer entries, JSON fields,
// HTTP paths), made safe to print on a terminal. Such bytes are never printed raw: an ESC or C1 control
// inside a tensor name would otherwise set the terminal's title or colours, move the cursor or, on some
// terminals, answer back.
#pragma once
#include <string>
#include <string_view>

namespace anelab {

// `s` with every byte a terminal could act on replaced by a visible escape; printable text, valid UTF-8
// included, is kept as it is:
//   - C0 controls (0x00-0x1F) and DEL (0x7F) as \xNN (with keep_newlines, '\n' and '\t' stay as they are:
//     for whole messages whose own lines are ours);
//   - C1 controls (U+0080-U+009F, encoded C2 80-C2 9F) and the bidirectional overrides/isolates (U+202A-U+202E,
//     U+2066-U+2069, which reorder what is shown) as \u{XXXX};
//   - bytes that are not valid UTF-8 (a stray continuation byte, a bad lead byte, a truncated, overlong or
//     surrogate sequence, a code point above U+10FFFF) as \xNN, one per byte.
// For display, not reversible: a backslash stays as it is, so applying it twice gives the same text, and a
// message can be escaped where it is made and again where it is printed.
std::string quote_untrusted(std::string_view s, bool keep_newlines = false);

}  // namespace anelab
