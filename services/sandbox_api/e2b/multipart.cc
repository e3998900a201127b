#include "services/sandbox_api/e2b/multipart.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace corral::sandbox_api {
namespace {

// A parameter of a header value (`name="x"` or `name=x`), unquoted; "" when absent.
std::string Param(absl::string_view value, absl::string_view key) {
  for (absl::string_view item : absl::StrSplit(value, ';')) {
    item = absl::StripAsciiWhitespace(item);
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(kv.first), key)) continue;
    absl::string_view v = absl::StripAsciiWhitespace(kv.second);
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') {
      v = v.substr(1, v.size() - 2);
      std::string out;
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] == '\\' && i + 1 < v.size()) ++i;
        out.push_back(v[i]);
      }
      return out;
    }
    return std::string(v);
  }
  return "";
}

}  // namespace

absl::StatusOr<std::string> MultipartBoundary(absl::string_view content_type) {
  if (!absl::StartsWithIgnoreCase(absl::StripLeadingAsciiWhitespace(content_type), "multipart/form-data")) {
    return absl::InvalidArgumentError("expected a multipart/form-data body");
  }
  std::string boundary = Param(content_type, "boundary");
  if (boundary.empty() || boundary.size() > 200) return absl::InvalidArgumentError("multipart body without a boundary");
  return boundary;
}

absl::StatusOr<std::vector<FormPart>> ParseMultipart(absl::string_view body, absl::string_view boundary) {
  const std::string delimiter = absl::StrCat("--", boundary);
  std::vector<FormPart> parts;
  size_t at = body.find(delimiter);
  if (at == absl::string_view::npos) return absl::InvalidArgumentError("multipart body without its boundary");
  at += delimiter.size();
  while (true) {
    if (body.substr(at, 2) == "--") return parts;  // the close delimiter
    if (body.substr(at, 2) != "\r\n") return absl::InvalidArgumentError("malformed multipart delimiter");
    at += 2;
    const size_t headers_end = body.find("\r\n\r\n", at);
    if (headers_end == absl::string_view::npos)
      return absl::InvalidArgumentError("multipart part without headers' end");
    FormPart part;
    bool disposition = false;
    for (absl::string_view line : absl::StrSplit(body.substr(at, headers_end - at), "\r\n", absl::SkipEmpty())) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, absl::MaxSplits(':', 1));
      if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(kv.first), "content-disposition")) continue;
      disposition = true;
      part.name = Param(kv.second, "name");
      part.filename = Param(kv.second, "filename");
    }
    if (!disposition) return absl::InvalidArgumentError("multipart part without Content-Disposition");
    const size_t data_start = headers_end + 4;
    const size_t next = body.find(absl::StrCat("\r\n", delimiter), data_start);
    if (next == absl::string_view::npos) return absl::InvalidArgumentError("multipart part without its end");
    part.data = std::string(body.substr(data_start, next - data_start));
    parts.push_back(std::move(part));
    at = next + 2 + delimiter.size();
  }
}

}  // namespace corral::sandbox_api
