#include "services/sandbox_api/code_runner.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "libs/api/proto_time.h"
#include "libs/core/utf8.h"

namespace corral::sandbox_api {
namespace {

namespace asio = boost::asio;
using scheduler::CallOptions;
using scheduler::HostApi;

constexpr char kDir[] = "code";  // the code's directory, under the sandbox's home
constexpr char kOut[] = ".corral-stdout";
constexpr char kErr[] = ".corral-stderr";

// `sh -c script` with `args` as its positional parameters ("$@"), so that no argument is ever quoted into the
// script.
v1::ExecRequest Shell(const std::string& sandbox_id, const std::string& script, const std::vector<std::string>& args,
                      absl::Duration timeout) {
  v1::ExecRequest r;
  r.set_sandbox_id(sandbox_id);
  for (const char* a : {"/bin/sh", "-c"}) r.mutable_command()->add_argv(a);
  r.mutable_command()->add_argv(script);
  r.mutable_command()->add_argv("sh");  // $0
  for (const std::string& a : args) r.mutable_command()->add_argv(a);
  ToProto(timeout, r.mutable_command()->mutable_timeout());
  return r;
}

// A command of the toolchain, run in the code's directory with its output in two files, under the request's
// memory limit, so that stdout and stderr come back apart.
v1::ExecRequest Command(const std::string& sandbox_id, const std::vector<std::string>& argv, double timeout_s,
                        int64_t memory_mb, const std::optional<std::string>& stdin_text) {
  std::string script;
  if (memory_mb > 0) absl::StrAppend(&script, "ulimit -v ", memory_mb * 1024, " || exit 125; ");
  absl::StrAppend(&script, "exec \"$@\" >", kOut, " 2>", kErr);
  v1::ExecRequest r = Shell(sandbox_id, script, argv, absl::Seconds(timeout_s));
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

// Runs one command of the toolchain: Finished (with its code), TimeLimitExceeded, or Error (it could not run).
asio::awaitable<CommandResult> Run(HostApi& host, std::string sandbox_id, std::vector<std::string> argv,
                                   double timeout_s, int64_t memory_mb, std::optional<std::string> stdin_text,
                                   CallOptions options) {
  const v1::ExecRequest request = Command(sandbox_id, argv, timeout_s, memory_mb, stdin_text);
  auto outcome = co_await host.Exec(request, 4096, options);
  if (!outcome.ok()) {
    co_return Error(absl::StrCat("exception on running command ", argv[0], ": ", outcome.status().ToString()));
  }
  CommandResult r;
  r.execution_time = absl::ToDoubleSeconds(FromProto(outcome->exit.duration()));
  if (outcome->exit.exit_code() == 125 && !outcome->exit.timed_out()) {
    co_return Error(absl::StrCat("the memory limit could not be set: ", outcome->output));
  }
  auto out = co_await host.ReadFile(sandbox_id, absl::StrCat(kDir, "/", kOut), kMaxStreamBytes, options);
  if (!out.ok()) co_return Error(absl::StrCat("reading the output of ", argv[0], ": ", out.status().ToString()));
  auto err = co_await host.ReadFile(sandbox_id, absl::StrCat(kDir, "/", kErr), kMaxStreamBytes, options);
  if (!err.ok()) co_return Error(absl::StrCat("reading the output of ", argv[0], ": ", err.status().ToString()));
  r.stdout_text = ToValidUtf8(out->value_or(""));  // SandboxFusion decodes the streams as UTF-8
  r.stderr_text = ToValidUtf8(err->value_or(""));
  if (outcome->exit.timed_out()) {
    r.status = CommandResult::Status::kTimeLimitExceeded;
  } else {
    r.return_code = outcome->exit.exit_code();
  }
  co_return r;
}

}  // namespace

asio::awaitable<std::string> RunCode(HostApi& host, std::string sandbox_id, RunCodeRequest request, absl::Time deadline,
                                     std::string executor) {
  const CallOptions options{nullptr, deadline};
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
  // Its programs, looked up before anything runs: a missing one is the sandbox's lack, not the code's failure.
  const v1::ExecRequest look = Shell(sandbox_id, "for p; do command -v \"$p\" >/dev/null 2>&1 || exit 127; done",
                                     toolchain->programs, absl::Seconds(30));
  auto found = co_await host.Exec(look, 4096, options);
  if (!found.ok()) co_return SandboxErrorAnswer(absl::StrCat("the sandbox: ", found.status().ToString()), executor);
  if (found->exit.exit_code() != 0)
    co_return SandboxErrorAnswer(UnavailableMessage(request.language, toolchain), executor);

  std::optional<CommandResult> compile, run;
  if (!toolchain->compile.empty()) {
    compile = co_await Run(host, sandbox_id, toolchain->compile, request.compile_timeout, request.memory_limit_mb,
                           std::nullopt, options);
  }
  const bool compiled = !compile || (compile->status == CommandResult::Status::kFinished && compile->return_code == 0);
  if (compiled) {
    run = co_await Run(host, sandbox_id, toolchain->run, request.run_timeout, request.memory_limit_mb,
                       request.stdin_text, options);
  }
  std::vector<std::pair<std::string, std::string>> fetched;
  for (const std::string& path : request.fetch_files) {
    auto read = co_await host.ReadFile(sandbox_id, absl::StrCat(kDir, "/", path), kMaxFetchedBytes, options);
    if (read.ok() && read->has_value()) fetched.emplace_back(path, **read);  // only files that exist, as SandboxFusion
  }
  co_return RunCodeAnswer(compile, run, fetched, executor);
}

}  // namespace corral::sandbox_api
