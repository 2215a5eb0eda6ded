#include "serving/unicode_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdexcept>

namespace servelab {

struct UnicodeRegex::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

UnicodeRegex::UnicodeRegex(const std::string& pattern)
    : pattern_(pattern), compiled_(std::make_unique<Compiled>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  compiled_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (compiled_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw std::invalid_argument(std::string(reinterpret_cast<const char*>(message)) +
                                " at offset " + std::to_string(offset));
  }
  // Without JIT support (some architectures) the interpreter runs the same pattern.
  compiled_->jit = pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE) == 0;
}

UnicodeRegex::~UnicodeRegex() = default;

void UnicodeRegex::find_all(std::string_view text,
                            std::vector<std::pair<std::size_t, std::size_t>>& out) const {
  struct MatchData {
    pcre2_match_data* p;
    ~MatchData() { pcre2_match_data_free(p); }
  } md{pcre2_match_data_create_from_pattern(compiled_->code, nullptr)};
  if (md.p == nullptr) return;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t start = 0;
  while (start < text.size()) {
    int rc = pcre2_match(compiled_->code, subject, text.size(), start, 0, md.p, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(compiled_->code, subject, text.size(), start, PCRE2_NO_JIT, md.p, nullptr);
    }
    if (rc < 0) return;  // no further match (or a resource limit: the rest stays unmatched)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.p);
    const std::size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      start = e;
    } else {
      // An empty match: step over one character (one byte when the bytes there are ill-formed).
      std::size_t next = b + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80 &&
             next - b < 4) {
        ++next;
      }
      start = next;
    }
  }
}

}  // namespace servelab
