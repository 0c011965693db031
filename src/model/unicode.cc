#include "model/unicode.h"

#include <algorithm>
#include <array>
#include <iterator>

namespace tandem::unicode {
namespace {

struct Range {
  char32_t lo, hi;
};

// Sorted, non-overlapping. See the header for what is (not) covered.
constexpr Range kLetters[] = {
    {0x41, 0x5A},       {0x61, 0x7A},     {0xAA, 0xAA},     {0xB5, 0xB5},     {0xBA, 0xBA},
    {0xC0, 0xD6},       {0xD8, 0xF6},     {0xF8, 0x2C1},    {0x2C6, 0x2D1},   {0x2E0, 0x2E4},
    {0x2EC, 0x2EC},     {0x2EE, 0x2EE},   {0x370, 0x374},   {0x376, 0x377},   {0x37A, 0x37D},
    {0x37F, 0x37F},     {0x386, 0x386},   {0x388, 0x38A},   {0x38C, 0x38C},   {0x38E, 0x3A1},
    {0x3A3, 0x3F5},     {0x3F7, 0x481},   {0x48A, 0x52F},   {0x531, 0x556},   {0x559, 0x559},
    {0x560, 0x588},     {0x5D0, 0x5EA},   {0x5EF, 0x5F2},   {0x620, 0x64A},   {0x66E, 0x66F},
    {0x671, 0x6D3},     {0x6D5, 0x6D5},   {0x6E5, 0x6E6},   {0x6EE, 0x6EF},   {0x6FA, 0x6FC},
    {0x6FF, 0x6FF},     {0x904, 0x939},   {0x93D, 0x93D},   {0x950, 0x950},   {0x958, 0x961},
    {0x971, 0x980},     {0xE01, 0xE30},   {0xE32, 0xE33},   {0xE40, 0xE46},   {0x10A0, 0x10C5},
    {0x10D0, 0x10FA},   {0x10FC, 0x10FF}, {0x1100, 0x11FF}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45},   {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F7D}, {0x1F80, 0x1FB4},
    {0x1FB6, 0x1FBC},   {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2071, 0x2071}, {0x207F, 0x207F},
    {0x2090, 0x209C},   {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115},
    {0x2119, 0x211D},   {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128}, {0x212A, 0x212D},
    {0x212F, 0x2139},   {0x2C00, 0x2CE4}, {0x3005, 0x3006}, {0x3031, 0x3035}, {0x3041, 0x3096},
    {0x309D, 0x309F},   {0x30A1, 0x30FA}, {0x30FC, 0x30FF}, {0x3105, 0x312F}, {0x3131, 0x318E},
    {0x31A0, 0x31BF},   {0x31F0, 0x31FF}, {0x3400, 0x4DBF}, {0x4E00, 0x9FFF}, {0xA000, 0xA48C},
    {0xAC00, 0xD7A3},   {0xF900, 0xFAFF}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0xFF66, 0xFFBE},
    {0x20000, 0x3134F},
};

constexpr Range kNumbers[] = {
    {0x30, 0x39},     {0xB2, 0xB3},     {0xB9, 0xB9},     {0xBC, 0xBE},     {0x660, 0x669},
    {0x6F0, 0x6F9},   {0x966, 0x96F},   {0x9E6, 0x9EF},   {0xA66, 0xA6F},   {0xAE6, 0xAEF},
    {0xB66, 0xB6F},   {0xBE6, 0xBF2},   {0xC66, 0xC6F},   {0xCE6, 0xCEF},   {0xD66, 0xD6F},
    {0xE50, 0xE59},   {0x2070, 0x2070}, {0x2074, 0x2079}, {0x2080, 0x2089}, {0x2150, 0x2189},
    {0x2460, 0x249B}, {0x24EA, 0x24FF}, {0x2776, 0x2793}, {0x3007, 0x3007}, {0x3021, 0x3029},
    {0x3038, 0x303A}, {0xFF10, 0xFF19},
};

constexpr Range kWhitespace[] = {
    {0x09, 0x0D},     {0x20, 0x20},     {0x85, 0x85},     {0xA0, 0xA0},     {0x1680, 0x1680},
    {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
};

template <size_t N>
bool InRanges(const Range (&ranges)[N], char32_t cp) {
  const Range* it = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                                     [](char32_t c, const Range& r) { return c < r.lo; });
  return it != std::begin(ranges) && cp <= (it - 1)->hi;
}

bool IsContinuation(uint8_t b) { return b >= 0x80 && b <= 0xBF; }

// Sequence length implied by a lead byte and the allowed range of the byte
// after it (Unicode Table 3-7); 0 if the byte cannot start a sequence.
int LeadInfo(uint8_t lead, uint8_t* second_lo, uint8_t* second_hi) {
  *second_lo = 0x80;
  *second_hi = 0xBF;
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) {
    if (lead == 0xE0) *second_lo = 0xA0;
    if (lead == 0xED) *second_hi = 0x9F;
    return 3;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    if (lead == 0xF0) *second_lo = 0x90;
    if (lead == 0xF4) *second_hi = 0x8F;
    return 4;
  }
  return 0;
}

struct ByteTables {
  std::array<char32_t, 256> to_unicode{};
  std::array<int16_t, 324> to_byte{};  // indexed by code point < 0x144
};

ByteTables BuildByteTables() {
  ByteTables t;
  t.to_byte.fill(-1);
  char32_t next_extra = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    t.to_unicode[b] = printable ? char32_t(b) : next_extra++;
    t.to_byte[t.to_unicode[b]] = int16_t(b);
  }
  return t;
}

const ByteTables& Tables() {
  static const ByteTables tables = BuildByteTables();
  return tables;
}

}  // namespace

int ClassifySequence(std::string_view bytes, size_t pos, SequenceStatus* status) {
  uint8_t lo = 0, hi = 0;
  const int need = LeadInfo(uint8_t(bytes[pos]), &lo, &hi);
  if (need == 0) {
    *status = SequenceStatus::kInvalid;
    return 1;
  }
  for (int k = 1; k < need; ++k) {
    if (pos + k >= bytes.size()) {
      *status = SequenceStatus::kIncomplete;
      return k;
    }
    const uint8_t b = uint8_t(bytes[pos + k]);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : IsContinuation(b);
    if (!ok) {
      *status = SequenceStatus::kInvalid;
      return k;
    }
  }
  *status = SequenceStatus::kComplete;
  return need;
}

DecodedChar DecodeAt(std::string_view text, size_t pos) {
  SequenceStatus status;
  const int n = ClassifySequence(text, pos, &status);
  DecodedChar out;
  if (status != SequenceStatus::kComplete) {
    out.code_point = uint8_t(text[pos]);
    return out;  // one invalid byte
  }
  static constexpr uint8_t kLeadMask[] = {0, 0x7F, 0x1F, 0x0F, 0x07};
  char32_t cp = uint8_t(text[pos]) & kLeadMask[n];
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (uint8_t(text[pos + k]) & 0x3F);
  out.code_point = cp;
  out.length = n;
  out.valid = true;
  return out;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

bool IsLetter(char32_t cp) { return InRanges(kLetters, cp); }
bool IsNumber(char32_t cp) { return InRanges(kNumbers, cp); }
bool IsWhitespace(char32_t cp) { return InRanges(kWhitespace, cp); }

char32_t ByteToUnicode(uint8_t byte) { return Tables().to_unicode[byte]; }

int UnicodeToByte(char32_t code_point) {
  if (code_point >= Tables().to_byte.size()) return -1;
  return Tables().to_byte[code_point];
}

}  // namespace tandem::unicode
