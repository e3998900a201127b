// Incremental Server-Sent Events parsing: bytes go in as they arrive from an upstream, complete events come out.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace corral::http {

struct SseEvent {
  std::string event;  // the `event:` field; empty for the default "message"
  std::string data;   // `data:` lines joined with '\n'
};

// Not thread-safe. Lines end in "\n", "\r\n" or "\r"; a blank line ends an event; ':' lines are comments.
class SseParser {
 public:
  explicit SseParser(size_t max_event_bytes = 16 << 20) : max_event_bytes_(max_event_bytes) {}
  // Appends `bytes`; returns the events they completed. RESOURCE_EXHAUSTED when one event grows past the limit.
  absl::StatusOr<std::vector<SseEvent>> Feed(absl::string_view bytes);

 private:
  void Line(absl::string_view line, std::vector<SseEvent>& out);
  const size_t max_event_bytes_;
  std::string partial_;  // an unfinished line
  SseEvent current_;
  bool has_fields_ = false;
  bool last_was_cr_ = false;
};

}  // namespace corral::http
