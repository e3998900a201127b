// E2B's code interpreter (@e2b/code-interpreter's runCode and code contexts, at E2b-Sandbox-Port 49999) over
// kernels Corral runs in the sandbox (e2b/scripts/code_kernel.py, compiled in): one python3 process per context,
// run by the sandbox's user in the context's directory, its globals kept between runs. Each language has a
// default context, made at its first run. A context runs one piece of code at a time (the others wait their
// turn); the run of a reader that left is interrupted (SIGINT) and its context lives on, unless the code ignores
// the interrupt for kInterruptGrace (the kernel is then ended and the context forgotten). A kernel is ended
// alone (SIGTERM to its process group), never by ending its call, which would end every process of the sandbox.
// Like envd's processes, kernels live in the replica that started them. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/awaitable.hpp"
#include "corral/envd/code_interpreter.pb.h"
#include "services/sandbox_api/e2b/envd.h"

namespace corral::sandbox_api {

class CodeInterpreter {
 public:
  // How often a quiet run sends a keepalive line (how a reader that left is noticed).
  static constexpr absl::Duration kKeepalive = absl::Seconds(1);
  // How long an interrupted run may take to stop before its kernel is stopped.
  static constexpr absl::Duration kInterruptGrace = absl::Seconds(5);
  // The line a kernel ends each run with (not sent on).
  static constexpr char kEndOfExecution[] = R"({"type": "end_of_execution"})";

  CodeInterpreter(Clock* clock, E2bOptions options) : clock_(clock), options_(std::move(options)) {}
  // Stops every kernel.
  ~CodeInterpreter();

  boost::asio::awaitable<absl::StatusOr<envd::CodeContext>> CreateContext(const EnvdSandbox& s,
                                                                          envd::CreateContextRequest request);
  std::vector<envd::CodeContext> ListContexts(const EnvdSandbox& s) const;
  // NOT_FOUND for a context this replica does not have.
  absl::Status RemoveContext(const EnvdSandbox& s, const std::string& id);
  // A new kernel in the context's place (its state is gone), same id.
  boost::asio::awaitable<absl::Status> RestartContext(const EnvdSandbox& s, std::string id);
  // Runs `request`'s code; each line of its output (the SDK's NDJSON) goes to `out`.
  boost::asio::awaitable<absl::Status> Execute(const EnvdSandbox& s, envd::ExecuteRequest request, EnvdStream& out);

  size_t kernels() const;
  // Stops the kernels of a sandbox that was killed here.
  void Forget(const std::string& sandbox_id);
  // A lease this replica just made, forked or resumed (Envd::Remember): a fork's child takes up the copies of its
  // parent's kernels (carried with their globals: kernels start fork-ready where the host can carry them) at its
  // next call (TakeUpCarried), under the same context ids.
  void Remember(const v1::SandboxLease& lease);
  boost::asio::awaitable<void> TakeUpCarried(const EnvdSandbox& s);

 private:
  struct Kernel;
  using KernelPtr = std::shared_ptr<Kernel>;

  absl::StatusOr<std::string> Language(const std::string& language) const;
  boost::asio::awaitable<absl::StatusOr<KernelPtr>> Start(const EnvdSandbox& s, envd::CodeContext context);
  // The context `id`, or the language's default (started when it has none yet).
  boost::asio::awaitable<absl::StatusOr<KernelPtr>> Find(const EnvdSandbox& s, const envd::ExecuteRequest& request);
  // One run on a kernel whose turn this is.
  boost::asio::awaitable<absl::Status> Run(const EnvdSandbox& s, Kernel& kernel, const envd::ExecuteRequest& request,
                                           EnvdStream& out);
  // Ends `kernel` and forgets it (if its context still names it).
  void Drop(const std::string& sandbox_id, Kernel& kernel);
  // Forgets the kernels that ended (their sandbox expired, or was killed through another replica); run as
  // kernels start, so a replica's table does not grow with sandboxes it will not hear of again.
  void SweepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  const E2bOptions options_;
  mutable absl::Mutex mu_;
  absl::BitGen bitgen_ ABSL_GUARDED_BY(mu_);
  // sandbox (lease) id -> context id -> kernel
  std::map<std::string, std::map<std::string, KernelPtr>> kernels_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::SandboxLease> carried_ ABSL_GUARDED_BY(mu_);  // children yet to take theirs up
};

}  // namespace corral::sandbox_api
