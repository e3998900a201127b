#include "services/sandbox_api/code_runner.h"

#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "libs/api/proto_time.h"
#include "libs/core/utf8.h"
#include "openssl/rand.h"

namespace corral::sandbox_api {
namespace {

namespace asio = boost::asio;
using sandbox::CallOptions;
using sandbox::ExecOutcome;
using sandbox::HostApi;

constexpr char kDir[] = "code";  // the code's directory, under the sandbox's home

// What a command's shell prints on stderr, before anything of the code runs, when a program of the toolchain is
// not on the sandbox's PATH: unguessable, so the code cannot pass its own failure off as the sandbox's lack.
std::string MissingMarker() {
  unsigned char raw[8];
  RAND_bytes(raw, sizeof raw);
  return absl::StrCat("corral-missing-",
                      absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(raw), sizeof raw)), ":");
}

// One command of the toolchain as one process: `sh -c SCRIPT sh ARGV...`, the script looking up `programs`
// first (a missing one: the marker and exit 127), then setting the memory limit, then exec'ing the command, so
// its stdout and stderr are the command's own. No argument is ever quoted into the script.
v1::ExecRequest Command(const std::string& sandbox_id, const std::vector<std::string>& programs,
                        const std::string& marker, const std::vector<std::string>& argv, double timeout_s,
                        int64_t memory_mb, const std::optional<std::string>& stdin_text) {
  std::string script;
  for (size_t i = 0; i < programs.size(); ++i) {
    absl::StrAppend(&script, "command -v \"$", i + 1, "\" >/dev/null 2>&1 || { printf '%s%s\\n' '", marker, "' \"$",
                    i + 1, "\" >&2; exit 127; }; ");
  }
  if (!programs.empty()) absl::StrAppend(&script, "shift ", programs.size(), "; ");
  if (memory_mb > 0) absl::StrAppend(&script, "ulimit -v ", memory_mb * 1024, " || exit 125; ");
  absl::StrAppend(&script, "exec \"$@\"");
  v1::ExecRequest r;
  r.set_sandbox_id(sandbox_id);
  for (const char* a : {"/bin/sh", "-c"}) r.mutable_command()->add_argv(a);
  r.mutable_command()->add_argv(script);
  r.mutable_command()->add_argv("sh");  // $0
  for (const std::string& p : programs) r.mutable_command()->add_argv(p);
  for (const std::string& a : argv) r.mutable_command()->add_argv(a);
  ToProto(absl::Seconds(timeout_s), r.mutable_command()->mutable_timeout());
  r.mutable_command()->set_cwd(kDir);
  if (stdin_text) r.set_stdin(*stdin_text);
  return r;
}

CommandResult Error(std::string why) {
  CommandResult r;
  r.status = CommandResult::Status::kError;
  r.stderr_text = std::move(why);
  return r;
}

// A command's outcome: Finished (with its code), TimeLimitExceeded, or Error (it could not run); nullopt when a
// program it needs is missing (its shell printed the marker).
std::optional<CommandResult> Outcome(const absl::StatusOr<sandbox::ExecOutcome>& outcome, const std::string& what,
                                     const std::string& marker) {
  if (!outcome.ok())
    return Error(absl::StrCat("exception on running command ", what, ": ", outcome.status().ToString()));
  if (outcome->exit.exit_code() == 127 && absl::StartsWith(outcome->stderr_head, marker)) return std::nullopt;
  if (outcome->exit.exit_code() == 125 && !outcome->exit.timed_out()) {
    return Error(absl::StrCat("the memory limit could not be set: ", outcome->output));
  }
  CommandResult r;
  r.execution_time = absl::ToDoubleSeconds(FromProto(outcome->exit.duration()));
  r.stdout_text = ToValidUtf8(outcome->stdout_head);  // SandboxFusion decodes the streams as UTF-8
  r.stderr_text = ToValidUtf8(outcome->stderr_head);
  if (outcome->exit.timed_out()) {
    r.status = CommandResult::Status::kTimeLimitExceeded;
  } else {
    r.return_code = outcome->exit.exit_code();
  }
  return r;
}

}  // namespace

asio::awaitable<std::string> RunCode(sandbox::HostApi& host, std::string sandbox_id, RunCodeRequest request,
                                     absl::Time deadline, std::string executor) {
  const sandbox::CallOptions options{nullptr, deadline};
  const Toolchain* toolchain = ToolchainFor(request.language);
  if (toolchain == nullptr) co_return SandboxErrorAnswer(UnavailableMessage(request.language, nullptr), executor);

  // The code and the files, in a directory of their own.
  v1::InlineFile source;
  source.set_path(absl::StrCat(kDir, "/", toolchain->source));
  source.set_content(request.code);
  if (absl::Status s = co_await host.WriteFile(sandbox_id, source, options); !s.ok()) {
    co_return SandboxErrorAnswer(absl::StrCat("writing the code: ", s.ToString()), executor);
  }
  for (const auto& [path, content] : request.files) {
    v1::InlineFile file;
    file.set_path(absl::StrCat(kDir, "/", path));
    file.set_content(content);
    if (absl::Status s = co_await host.WriteFile(sandbox_id, file, options); !s.ok()) {
      co_return SandboxErrorAnswer(absl::StrCat("writing ", path, ": ", s.ToString()), executor);
    }
  }
  // The first command looks the toolchain's programs up before anything runs: a missing one is the sandbox's
  // lack, not the code's failure.
  const std::string marker = MissingMarker();
  std::vector<std::string> programs = toolchain->programs;
  std::optional<CommandResult> compile, run;
  if (!toolchain->compile.empty()) {
    const v1::ExecRequest command = Command(sandbox_id, programs, marker, toolchain->compile, request.compile_timeout,
                                            request.memory_limit_mb, std::nullopt);
    programs.clear();
    auto outcome = co_await host.Exec(command, kMaxStreamBytes, options);
    compile = Outcome(outcome, toolchain->compile[0], marker);
    if (!compile) co_return SandboxErrorAnswer(UnavailableMessage(request.language, toolchain), executor);
  }
  const bool compiled = !compile || (compile->status == CommandResult::Status::kFinished && compile->return_code == 0);
  if (compiled) {
    const v1::ExecRequest command = Command(sandbox_id, programs, marker, toolchain->run, request.run_timeout,
                                            request.memory_limit_mb, request.stdin_text);
    auto outcome = co_await host.Exec(command, kMaxStreamBytes, options);
    run = Outcome(outcome, toolchain->run[0], marker);
    if (!run) co_return SandboxErrorAnswer(UnavailableMessage(request.language, toolchain), executor);
  }
  std::vector<std::pair<std::string, std::string>> fetched;
  for (const std::string& path : request.fetch_files) {
    auto read = co_await host.ReadFile(sandbox_id, absl::StrCat(kDir, "/", path), kMaxFetchedBytes, options);
    if (read.ok() && read->has_value()) fetched.emplace_back(path, **read);  // only files that exist, as SandboxFusion
  }
  co_return RunCodeAnswer(compile, run, fetched, executor);
}

}  // namespace corral::sandbox_api
