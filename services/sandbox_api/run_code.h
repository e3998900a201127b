// SandboxFusion's `POST /run_code`, as verl's code tools and code rewards call it: the request as Corral reads it,
// the toolchain each language runs with, and the answer in SandboxFusion's exact shape. Plain C++: the front that
// serves it (leasing a sandbox, running the commands, the cluster-wide limit) is an adapter over this.
//
// Request: {"code", "language", "compile_timeout" (s, 10), "run_timeout" (s, 10), "memory_limit_MB" (-1: none),
// "stdin" (string or null), "files" {path: base64 or null}, "fetch_files" [path]}; unknown fields are ignored.
// Answer: 200 {"status": Success|Failed|SandboxError, "message", "compile_result", "run_result",
// "executor_pod_name", "files"}, each result {"status": Finished|Error|TimeLimitExceeded, "execution_time",
// "return_code", "stdout", "stderr"}; a request that is not one: 422 {"detail": [{"type", "loc", "msg", "input"}]}
// as FastAPI words it.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"

namespace corral::sandbox_api {

struct RunCodeLimits {
  size_t max_code_bytes = 4 << 20;    // the code itself
  size_t max_files_bytes = 64 << 20;  // every uploaded file, decoded
  double max_timeout_seconds = 3600;  // compile_timeout and run_timeout each
};

struct RunCodeRequest {
  std::string code;
  std::string language;
  double compile_timeout = 10;
  double run_timeout = 10;
  int64_t memory_limit_mb = -1;  // -1: no limit
  std::optional<std::string> stdin_text;
  std::vector<std::pair<std::string, std::string>> files;  // path → content (decoded), in the request's order
  std::vector<std::string> fetch_files;
};

// A refusal as SandboxFusion's server gives it: HTTP status and body.
struct RunCodeRefusal {
  int http_status = 422;
  std::string body;
};

// The request, or why it is not one (422 with FastAPI's detail list, naming the field). Never throws.
std::variant<RunCodeRequest, RunCodeRefusal> ParseRunCode(absl::string_view body, const RunCodeLimits& limits = {});

// How a language's code runs: the file it is written to, the compile command (empty: interpreted), the run
// command, and the programs both need (looked up on the sandbox's PATH before running).
struct Toolchain {
  absl::string_view language;
  absl::string_view source;  // "main.py"
  std::vector<std::string> compile;
  std::vector<std::string> run;
  std::vector<std::string> programs;
  absl::string_view provided_by;  // what provides the programs: "Debian's g++", for the error when they are missing
};

// The languages SandboxFusion accepts (29 names; what verl's SUPPORTED_LANGUAGES lists too).
std::span<const absl::string_view> SandboxFusionLanguages();
// The toolchain Corral runs `language` with; nullptr for an accepted language Corral has no toolchain for.
const Toolchain* ToolchainFor(absl::string_view language);
// The SandboxError message for a language that cannot run here: which language, and what would provide it.
std::string UnavailableMessage(absl::string_view language, const Toolchain* toolchain);

// One command's outcome (SandboxFusion's CommandRunResult).
struct CommandResult {
  enum class Status { kFinished, kError, kTimeLimitExceeded };
  Status status = Status::kFinished;
  double execution_time = 0;  // seconds
  std::optional<int> return_code;
  std::string stdout_text, stderr_text;  // as read (capped); invalid UTF-8 is replaced
};

// The answer: status derived as SandboxFusion does (an Error → SandboxError with its stderr as the message; a
// time limit or a non-zero return code → Failed; else Success), every field present, in its key order.
std::string RunCodeAnswer(const std::optional<CommandResult>& compile, const std::optional<CommandResult>& run,
                          const std::vector<std::pair<std::string, std::string>>& fetched,
                          const std::string& executor = "");
// A SandboxError answer with `message` and no results (the language cannot run here, no sandbox was to be had).
std::string SandboxErrorAnswer(const std::string& message, const std::string& executor = "");

}  // namespace corral::sandbox_api
