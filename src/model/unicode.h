// UTF-8 and Unicode helpers for the tokenizers: decoding that never fails,
// an approximate general-category classifier for pre-tokenization, and the
// GPT-2 byte-level alphabet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::unicode {

// One decoded unit of a byte string. A valid UTF-8 sequence gives its code
// point; any byte that does not start a valid, complete sequence is returned
// alone with `valid` false, so byte strings of any content can be walked and
// reassembled exactly.
struct DecodedChar {
  char32_t code_point = 0;
  int length = 1;  // bytes consumed, 1..4
  bool valid = false;
};
DecodedChar DecodeAt(std::string_view text, size_t pos);

void AppendUtf8(char32_t code_point, std::string* out);

// How a byte prefix relates to UTF-8 validity, for streaming output.
// Returns the number of leading bytes of `bytes[pos..]` that form one
// sequence and sets *status:
//   kComplete:   a valid sequence of that length;
//   kIncomplete: a valid prefix that needs more bytes (length = bytes seen);
//   kInvalid:    a maximal invalid subpart of that length (emit one U+FFFD).
enum class SequenceStatus { kComplete, kIncomplete, kInvalid };
int ClassifySequence(std::string_view bytes, size_t pos, SequenceStatus* status);

// Approximate general categories. Exact for ASCII and Latin-1; for the rest
// the tables cover the letter and digit ranges of Latin, Greek, Cyrillic,
// Armenian, Hebrew, Arabic, Devanagari, Thai, Georgian, Hangul, kana, CJK
// ideographs and full-width forms. Combining marks are never letters (as in
// Unicode). Code points outside the tables count as "other" (punctuation-
// like), which can only move pre-token boundaries, never lose bytes.
bool IsLetter(char32_t cp);
bool IsNumber(char32_t cp);
bool IsWhitespace(char32_t cp);

// GPT-2's reversible map from bytes to printable code points: printable
// Latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in order.
char32_t ByteToUnicode(uint8_t byte);
// Inverse of ByteToUnicode; -1 for code points outside the byte alphabet.
int UnicodeToByte(char32_t code_point);

}  // namespace tandem::unicode
