// Datasets for `corral batch submit` and `corral run`: JSONL, one task per line, in the shape of the Task message
// (scheduler.proto) with conveniences people expect from a dataset file: enum values by short name ("runner":
// "tool_loop", "function": "numeric", "kind": "bash", "network_policy": "proxy_only"), "*_json" fields as JSON values,
// file contents as plain text
// ("content"; "content_base64" for binary; "content_file" for a file's path, relative to the dataset), a numeric
// "answer", and any other key kept as the task's metadata.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "corral/v1/scheduler.pb.h"

namespace corral::cli {

// INVALID_ARGUMENT "line N: ..." for a line that is not such a task. Relative content_file paths are under
// `base_dir`.
absl::StatusOr<v1::Task> TaskFromJsonLine(const std::string& line, int line_number, const std::string& base_dir = "");
// Every non-empty line of `path`; NOT_FOUND when the file cannot be read.
absl::StatusOr<std::vector<v1::Task>> LoadJsonl(const std::string& path);

}  // namespace corral::cli
