// UTF-8 helpers shared by the tokenizer and the detokenizer. Invalid input is handled the way
// Rust's String::from_utf8_lossy does (HF `tokenizers` is Rust): each maximal invalid subpart of a
// byte sequence becomes one U+FFFD, so our decode matches HF's byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::tokenizer {

// Examines the sequence starting at s[i]. Returns its length if it is one valid character;
// otherwise 0 and sets *bad_len to the length of the maximal invalid subpart (>= 1). If the input
// ends inside a sequence that could still become valid, *truncated is set.
inline size_t utf8_char_len(std::string_view s, size_t i, size_t* bad_len, bool* truncated) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = b(i);
  *truncated = false;
  if (b0 < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) need = 1;
  else if (b0 == 0xE0) need = 2, lo = 0xA0;
  else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) need = 2;
  else if (b0 == 0xED) need = 2, hi = 0x9F;
  else if (b0 == 0xF0) need = 3, lo = 0x90;
  else if (b0 >= 0xF1 && b0 <= 0xF3) need = 3;
  else if (b0 == 0xF4) need = 3, hi = 0x8F;
  else {
    *bad_len = 1;
    return 0;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) {
      *truncated = true;
      *bad_len = k;
      return 0;
    }
    const uint8_t c = b(i + k);
    const bool ok = k == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) {
      *bad_len = k;
      return 0;
    }
  }
  return need + 1;
}

// Offset of the first invalid byte, or npos if `s` is valid UTF-8.
inline size_t utf8_first_invalid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t bad;
    bool trunc;
    const size_t n = utf8_char_len(s, i, &bad, &trunc);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

inline void append_replacement(std::string* out) { out->append("\xEF\xBF\xBD"); }

// Lossy decoding: invalid subparts -> U+FFFD.
inline std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t bad;
    bool trunc;
    const size_t n = utf8_char_len(s, i, &bad, &trunc);
    if (n) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      append_replacement(&out);
      i += bad;
    }
  }
  return out;
}

// Length of a trailing incomplete-but-possibly-valid sequence (0 if none).
inline size_t utf8_incomplete_tail(std::string_view s) {
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const size_t i = s.size() - back;
    const uint8_t c = static_cast<uint8_t>(s[i]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t bad;
    bool trunc;
    if (utf8_char_len(s, i, &bad, &trunc) == 0 && trunc) return back;
    return 0;
  }
  return 0;
}

// Decodes the code point at s[i] (which must start a valid character); advances i.
inline char32_t utf8_next(std::string_view s, size_t* i) {
  const uint8_t b0 = static_cast<uint8_t>(s[*i]);
  if (b0 < 0x80) {
    ++*i;
    return b0;
  }
  int n = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  char32_t cp = b0 & (0x7F >> n);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[*i + k]) & 0x3F);
  *i += n;
  return cp;
}

inline void utf8_append(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace deepinfer::tokenizer
