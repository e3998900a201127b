// A sandbox host as the scheduler's coroutines use it: create, delete, exec (output kept head + tail so a tool's
// output can be middle-elided), files, templates and HostInfo, each an awaitable over gRPC's callback API.
// Thread-safe (the stub is).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "boost/asio/awaitable.hpp"
#include "corral/v1/sandbox.grpc.pb.h"
#include "grpcpp/channel.h"
#include "services/scheduler/interactive.h"
#include "services/scheduler/run_control.h"

namespace corral::scheduler {

// Where a call belongs: the episode that may stop it and the deadline it must finish by.
struct CallOptions {
  RunControl* control = nullptr;
  absl::Time deadline = absl::InfiniteFuture();
};

// Process output bounded to `limit` bytes: the first half and the last half are kept, the middle counted.
class OutputTail {
 public:
  explicit OutputTail(size_t limit) : limit_(limit) {}
  void Append(const std::string& data);
  // The output, middle-elided ("...[N bytes elided]...") when it was longer than the limit.
  std::string Text() const;
  // The last `n` bytes.
  std::string Last(size_t n) const;
  size_t total() const { return total_; }

 private:
  size_t limit_;
  size_t total_ = 0;
  std::string head_, tail_;
};

struct ExecOutcome {
  v1::ExitStatus exit;
  std::string output;  // stdout and stderr interleaved as they arrived, middle-elided at the limit
  std::string tail;    // the last KiB
  std::string stdout_tail;  // the last 4 KiB of stdout alone
  bool exited = false;
};

class HostClient {
 public:
  HostClient(std::string address, std::shared_ptr<grpc::Channel> channel, std::string token);
  const std::string& address() const { return address_; }

  boost::asio::awaitable<absl::StatusOr<v1::HostInfoResponse>> HostInfo(absl::Duration timeout);
  // One sandbox; RESOURCE_EXHAUSTED naming the reason when the host rejected it (full).
  boost::asio::awaitable<absl::StatusOr<v1::CreatedSandbox>> Create(const v1::SandboxSpec& spec, CallOptions options);
  boost::asio::awaitable<absl::StatusOr<v1::Sandbox>> Get(const std::string& sandbox_id, absl::Duration timeout);
  boost::asio::awaitable<absl::Status> Delete(const std::string& sandbox_id, absl::Duration timeout);
  // Runs to the process's exit; the host enforces command.timeout (exit.timed_out).
  boost::asio::awaitable<absl::StatusOr<ExecOutcome>> Exec(v1::ExecRequest request, size_t output_limit,
                                                           CallOptions options);
  boost::asio::awaitable<absl::Status> WriteFile(const std::string& sandbox_id, const v1::InlineFile& file,
                                                 CallOptions options);
  // Kills every process of the sandbox (KillAllProcesses): how many ran.
  boost::asio::awaitable<absl::StatusOr<uint32_t>> KillAllProcesses(const std::string& sandbox_id, CallOptions options);
  // Removes `path` (a whole tree with `recursive`); OK when it did not exist.
  boost::asio::awaitable<absl::Status> Remove(const std::string& sandbox_id, const std::string& path, bool recursive,
                                              CallOptions options);
  // A directory and its missing parents (an existing one is fine).
  boost::asio::awaitable<absl::Status> MakeDir(const std::string& sandbox_id, const std::string& path,
                                               CallOptions options);
  // The file's first `max_bytes`; nullopt when it does not exist.
  boost::asio::awaitable<absl::StatusOr<std::optional<std::string>>> ReadFile(const std::string& sandbox_id,
                                                                              const std::string& path, size_t max_bytes,
                                                                              CallOptions options);
  boost::asio::awaitable<absl::StatusOr<v1::Template>> PrepareTemplate(v1::PrepareTemplateRequest request,
                                                                       CallOptions options);
  // Has the host pull `ref` from its registry (PullImage); the image pulled.
  boost::asio::awaitable<absl::StatusOr<v1::Image>> PullImage(const std::string& ref, CallOptions options);
  // A process that serves many calls (ExecInteractive kept open); see interactive.h.
  boost::asio::awaitable<absl::StatusOr<std::shared_ptr<InteractiveProcess>>> StartInteractive(v1::ExecRequest start);
  boost::asio::awaitable<absl::StatusOr<v1::ListSandboxesResponse>> ListSandboxes(v1::ListSandboxesRequest request,
                                                                                  absl::Duration timeout);

 private:
  const std::string address_;
  std::unique_ptr<v1::SandboxHost::Stub> stub_;
  const std::string token_;
};

}  // namespace corral::scheduler
