// Bytes as text a person or a JSON reader can take: invalid UTF-8 replaced, nothing else changed. Used where raw
// process output (bytes in the protos) is shown or written as text.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace corral {

// `bytes` with every ill-formed UTF-8 sequence (stray continuation bytes, truncated or overlong sequences,
// surrogates, code points past U+10FFFF) replaced by U+FFFD, one per maximal ill-formed subpart.
std::string ToValidUtf8(absl::string_view bytes);

// The last non-empty line of `text` (trailing whitespace dropped), cut to `max_chars` bytes on a character
// boundary; "" when there is none.
std::string LastLine(absl::string_view text, size_t max_chars);

}  // namespace corral
