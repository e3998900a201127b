// A sandbox host as another service's coroutines see it (the scheduler's episode path, the sandbox API): the
// sandbox host's client, the only part of it other services include. HostClient (host_client.h) implements it
// over gRPC; tests use FakeHost (testing/fake_host.h). Implementations are thread-safe; every call ends by its
// deadline, and early when its caller's StopSignal stops (CallOptions.control: an episode that is stopped).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "boost/asio/awaitable.hpp"
#include "corral/v1/sandbox.pb.h"
#include "libs/async/stop_signal.h"

namespace corral::sandbox {

// Where a call belongs: the episode that may stop it and the deadline it must finish by.
struct CallOptions {
  async::StopSignal* control = nullptr;
  absl::Time deadline = absl::InfiniteFuture();
};

struct ExecOutcome {
  v1::ExitStatus exit;
  std::string output;       // stdout and stderr interleaved as they arrived, middle-elided at the limit
  std::string tail;         // the last KiB
  std::string stdout_tail;  // the last 4 KiB of stdout alone
  // Each stream alone, its first `output_limit` bytes (what SandboxFusion's runner reads of a command).
  std::string stdout_head, stderr_head;
  bool exited = false;
};

// A process in a sandbox that outlives one tool call (ExecInteractive kept open): stdin written as calls come,
// output read up to a marker the process prints after each call. The persistent bash and python tools.
class InteractiveProcess {
 public:
  virtual ~InteractiveProcess() = default;
  // Queues `data` for stdin.
  virtual void Write(std::string data) = 0;
  // Sends `signal` to the process group.
  virtual void Signal(int signal) = 0;
  // Sends EOF to stdin.
  virtual void CloseStdin() = 0;
  // Ends the process.
  virtual void Stop() = 0;
  // Its process id on the host ("p-7"), once started; empty where unknown.
  virtual std::string process_id() const { return ""; }

  struct Output {
    std::string text;     // everything before the marker (or everything read, when it did not come)
    bool marked = false;  // the marker came
    bool ended = false;   // the process exited or the stream broke
  };
  // Waits until `marker` appears in the output (consumed with everything before it), the process ends, or
  // `deadline` passes.
  virtual boost::asio::awaitable<Output> ReadUntil(const std::string& marker, absl::Time deadline) = 0;
};

// Sees an interactive process's events as they arrive, then the end of its call (OK after `exited`). Called on
// a gRPC thread: keep it short and never block.
struct ExecObserver {
  std::function<void(const v1::ExecEvent&)> on_event;
  std::function<void(const absl::Status&)> on_done;
};

class HostApi {
 public:
  virtual ~HostApi() = default;
  virtual const std::string& address() const = 0;

  virtual boost::asio::awaitable<absl::StatusOr<v1::HostInfoResponse>> HostInfo(absl::Duration timeout) = 0;
  // One sandbox; RESOURCE_EXHAUSTED naming the reason when the host rejected it (full).
  virtual boost::asio::awaitable<absl::StatusOr<v1::CreatedSandbox>> Create(const v1::SandboxSpec& spec,
                                                                            CallOptions options) = 0;
  // ForkSandbox: `request.count` children of a live sandbox; those that did not fit are `rejected`.
  virtual boost::asio::awaitable<absl::StatusOr<v1::CreateSandboxesResponse>> Fork(v1::ForkSandboxRequest request,
                                                                                   CallOptions options) = 0;
  // GetSandbox: the sandbox with its usage (its disk and samples as `request` asks).
  virtual boost::asio::awaitable<absl::StatusOr<v1::Sandbox>> GetSandbox(v1::GetSandboxRequest request,
                                                                         absl::Duration timeout) = 0;
  boost::asio::awaitable<absl::StatusOr<v1::Sandbox>> Get(const std::string& sandbox_id, absl::Duration timeout) {
    v1::GetSandboxRequest request;
    request.set_sandbox_id(sandbox_id);
    return GetSandbox(std::move(request), timeout);
  }
  // DeleteSandbox: whether it existed, and what it cost (its disk as `request` asks).
  virtual boost::asio::awaitable<absl::StatusOr<v1::DeleteSandboxResponse>> DeleteSandbox(
      v1::DeleteSandboxRequest request, absl::Duration timeout) = 0;
  boost::asio::awaitable<absl::StatusOr<v1::DeleteSandboxResponse>> DeleteSandbox(const std::string& sandbox_id,
                                                                                  absl::Duration timeout) {
    v1::DeleteSandboxRequest request;
    request.set_sandbox_id(sandbox_id);
    return DeleteSandbox(std::move(request), timeout);
  }
  boost::asio::awaitable<absl::Status> Delete(const std::string& sandbox_id, absl::Duration timeout) {
    auto deleted = co_await DeleteSandbox(sandbox_id, timeout);
    co_return deleted.status();
  }
  // Runs to the process's exit; the host enforces command.timeout (exit.timed_out). Output kept head + tail
  // within `output_limit`, and each stream's first `output_limit` bytes apart.
  virtual boost::asio::awaitable<absl::StatusOr<ExecOutcome>> Exec(v1::ExecRequest request, size_t output_limit,
                                                                   CallOptions options) = 0;
  virtual boost::asio::awaitable<absl::Status> WriteFile(const std::string& sandbox_id, const v1::InlineFile& file,
                                                         CallOptions options) = 0;
  // PauseSandbox (`paused`) or ResumeSandbox: the sandbox after it.
  virtual boost::asio::awaitable<absl::StatusOr<v1::Sandbox>> SetPaused(const std::string& sandbox_id, bool paused,
                                                                        CallOptions options) = 0;
  // Kills every process of the sandbox (KillAllProcesses): how many ran.
  virtual boost::asio::awaitable<absl::StatusOr<uint32_t>> KillAllProcesses(const std::string& sandbox_id,
                                                                            CallOptions options) = 0;
  // Removes `path` (a whole tree with `recursive`); OK when it did not exist.
  virtual boost::asio::awaitable<absl::Status> Remove(const std::string& sandbox_id, const std::string& path,
                                                      bool recursive, CallOptions options) = 0;
  // A directory and its missing parents (an existing one is fine).
  virtual boost::asio::awaitable<absl::Status> MakeDir(const std::string& sandbox_id, const std::string& path,
                                                       CallOptions options) = 0;
  // The file's first `max_bytes`; nullopt when it does not exist.
  virtual boost::asio::awaitable<absl::StatusOr<std::optional<std::string>>> ReadFile(const std::string& sandbox_id,
                                                                                      const std::string& path,
                                                                                      size_t max_bytes,
                                                                                      CallOptions options) = 0;
  // A path's info, a final symlink not followed; NOT_FOUND when it does not exist.
  virtual boost::asio::awaitable<absl::StatusOr<v1::FileInfo>> Stat(const std::string& sandbox_id,
                                                                    const std::string& path, CallOptions options) = 0;
  // A directory's entries (every page), by name.
  virtual boost::asio::awaitable<absl::StatusOr<std::vector<v1::FileInfo>>> ListDir(const std::string& sandbox_id,
                                                                                    const std::string& path,
                                                                                    CallOptions options) = 0;
  virtual boost::asio::awaitable<absl::StatusOr<v1::Template>> PrepareTemplate(v1::PrepareTemplateRequest request,
                                                                               CallOptions options) = 0;
  // Has the host pull `ref` from its registry (PullImage); the image pulled.
  virtual boost::asio::awaitable<absl::StatusOr<v1::Image>> PullImage(const std::string& ref, CallOptions options) = 0;
  virtual boost::asio::awaitable<absl::StatusOr<std::shared_ptr<InteractiveProcess>>> StartInteractive(
      v1::ExecRequest start, ExecObserver observer) = 0;
  // Takes up the stream of a process a fork carried into a sandbox (ExecInteractive `attach`); `observer` as
  // StartInteractive's.
  virtual boost::asio::awaitable<absl::StatusOr<std::shared_ptr<InteractiveProcess>>> Attach(
      v1::AttachProcess /*attach*/, ExecObserver /*observer*/ = {}) {
    co_return absl::UnimplementedError(absl::StrCat("host ", address(), " cannot attach to a process"));
  }
  virtual boost::asio::awaitable<absl::StatusOr<v1::ListSandboxesResponse>> ListSandboxes(
      v1::ListSandboxesRequest request, absl::Duration timeout) = 0;
};

}  // namespace corral::sandbox
