#include "libs/core/utf8.h"

#include "absl/strings/ascii.h"

namespace corral {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";

// The length of the well-formed sequence at the start of `s` (Unicode's table 3-7), or 0 when it is ill-formed.
size_t SequenceLength(absl::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (s.size() < n || b(1) < lo || b(1) > hi) return 0;
  for (size_t i = 2; i < n; ++i) {
    if (b(i) < 0x80 || b(i) > 0xBF) return 0;
  }
  return n;
}

}  // namespace

std::string ToValidUtf8(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  while (!bytes.empty()) {
    const size_t n = SequenceLength(bytes);
    if (n > 0) {
      out.append(bytes.data(), n);
      bytes.remove_prefix(n);
      continue;
    }
    out += kReplacement;
    // Skip the lead byte and the continuation bytes that followed it: one replacement per ill-formed run.
    bytes.remove_prefix(1);
    while (!bytes.empty() && (static_cast<unsigned char>(bytes[0]) & 0xC0) == 0x80) bytes.remove_prefix(1);
  }
  return out;
}

std::string LastLine(absl::string_view text, size_t max_chars) {
  text = absl::StripTrailingAsciiWhitespace(text);
  const size_t nl = text.rfind('\n');
  absl::string_view line = absl::StripAsciiWhitespace(nl == absl::string_view::npos ? text : text.substr(nl + 1));
  if (line.size() <= max_chars) return std::string(line);
  size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return std::string(line.substr(0, cut));
}

}  // namespace corral
