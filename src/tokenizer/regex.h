// Thin PCRE2 wrapper (UTF + UCP, JIT when available) used by the pre-tokenizers and normalizers.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <string>
#include <string_view>

#include "deepinfer/status.h"

namespace deepinfer::tokenizer {

class Regex {
 public:
  // Compiles `pattern` (Oniguruma/HF syntax, which PCRE2 accepts for the patterns tokenizers use).
  static Result<std::unique_ptr<Regex>> compile(const std::string& pattern, const std::string& where);
  // Escapes a literal string into a pattern.
  static std::string escape(std::string_view literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls fn(begin, end) for each successive non-overlapping match in `s` (valid UTF-8).
  // Empty matches are skipped (the search resumes one character later).
  template <typename Fn>
  void for_each_match(std::string_view s, Fn&& fn) const {
    size_t off = 0;
    pcre2_match_data* md = match_data();
    while (off <= s.size()) {
      const int rc = match(s, off, md);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t b = ov[0], e = ov[1];
      if (e == b) {  // empty match: step over one character
        if (b >= s.size()) break;
        off = b + 1;
        while (off < s.size() && (static_cast<unsigned char>(s[off]) & 0xC0) == 0x80) ++off;
        continue;
      }
      fn(b, e);
      off = e;
    }
  }

 private:
  Regex() = default;
  int match(std::string_view s, size_t off, pcre2_match_data* md) const;
  static pcre2_match_data* match_data();  // per thread, reused
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

}  // namespace deepinfer::tokenizer
