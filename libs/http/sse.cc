#include "libs/http/sse.h"

namespace corral::http {

absl::StatusOr<std::vector<SseEvent>> SseParser::Feed(absl::string_view bytes) {
  std::vector<SseEvent> out;
  for (char c : bytes) {
    if (c == '\n' && last_was_cr_) {  // the "\n" of a "\r\n"
      last_was_cr_ = false;
      continue;
    }
    last_was_cr_ = c == '\r';
    if (c == '\r' || c == '\n') {
      Line(partial_, out);
      partial_.clear();
      continue;
    }
    partial_ += c;
    if (partial_.size() + current_.data.size() > max_event_bytes_) {
      return absl::ResourceExhaustedError("a server-sent event is larger than the limit");
    }
  }
  return out;
}

void SseParser::Line(absl::string_view line, std::vector<SseEvent>& out) {
  if (line.empty()) {
    if (has_fields_) out.push_back(std::move(current_));
    current_ = SseEvent{};
    has_fields_ = false;
    return;
  }
  if (line[0] == ':') return;  // comment (keepalive)
  const size_t colon = line.find(':');
  absl::string_view field = line.substr(0, colon);
  absl::string_view value = colon == absl::string_view::npos ? "" : line.substr(colon + 1);
  if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  if (field == "data") {
    if (has_fields_ && !current_.data.empty()) current_.data += '\n';
    current_.data.append(value.data(), value.size());
    has_fields_ = true;
  } else if (field == "event") {
    current_.event = std::string(value);
    has_fields_ = true;
  }
}

}  // namespace corral::http
