#include "tokenizer/regex.h"

namespace deepinfer::tokenizer {

Result<std::unique_ptr<Regex>> Regex::compile(const std::string& pattern, const std::string& where) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &err_off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return Status::invalid_argument(where + ": regex '" + pattern + "' does not compile at offset " +
                                    std::to_string(err_off) + ": " + reinterpret_cast<const char*>(msg));
  }
  auto r = std::unique_ptr<Regex>(new Regex());
  r->code_ = code;
  r->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return r;
}

std::string Regex::escape(std::string_view literal) {
  std::string out = "\\Q";
  for (size_t i = 0; i < literal.size(); ++i) {
    if (literal.compare(i, 2, "\\E") == 0) {
      out += "\\E\\\\E\\Q";
      ++i;
    } else {
      out += literal[i];
    }
  }
  return out + "\\E";
}

Regex::~Regex() {
  if (code_) pcre2_code_free(code_);
}

pcre2_match_data* Regex::match_data() {
  struct Holder {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(md); }
  };
  thread_local Holder holder;
  return holder.md;
}

int Regex::match(std::string_view s, size_t off, pcre2_match_data* md) const {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  if (jit_) return pcre2_jit_match(code_, subject, s.size(), off, 0, md, nullptr);
  return pcre2_match(code_, subject, s.size(), off, PCRE2_NO_UTF_CHECK, md, nullptr);
}

}  // namespace deepinfer::tokenizer
