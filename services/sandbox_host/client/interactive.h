// InteractiveProcess (host_api.h) over gRPC: ExecInteractive (a bidirectional stream) kept open, stdin
// written as calls come, output read up to a marker the process prints after each call, signals sent to its
// process group. The scheduler's persistent bash and python tools are built on it. Thread-safe: gRPC reactions
// run on gRPC threads; awaiting coroutines are woken through a thread-safe channel.
#pragma once

#include <deque>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "boost/asio/any_io_executor.hpp"
#include "boost/asio/awaitable.hpp"
#include "boost/asio/experimental/concurrent_channel.hpp"
#include "corral/v1/sandbox.grpc.pb.h"
#include "grpcpp/support/client_callback.h"
#include "services/sandbox_host/client/host_api.h"

namespace corral::sandbox {

class InteractiveCall final : public InteractiveProcess, public grpc::ClientBidiReactor<v1::ExecInput, v1::ExecEvent> {
 public:
  // Starts `first`'s command (`start`, with stdin kept open), or takes up a carried process (`attach`). The
  // process lives until Stop(), its exit, or the end of the sandbox. UNAVAILABLE etc. when the call fails before
  // the process started.
  static boost::asio::awaitable<absl::StatusOr<std::shared_ptr<InteractiveProcess>>> Start(v1::SandboxHost::Stub* stub,
                                                                                           const std::string& token,
                                                                                           v1::ExecInput first,
                                                                                           ExecObserver observer = {});

  void Write(std::string data) override;
  void Signal(int signal) override;
  void CloseStdin() override;
  void Stop() override;  // ends the call: the host kills the process
  std::string process_id() const override;
  boost::asio::awaitable<Output> ReadUntil(const std::string& marker, absl::Time deadline) override;

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  using Channel = boost::asio::experimental::concurrent_channel<void(boost::system::error_code)>;
  explicit InteractiveCall(boost::asio::any_io_executor executor) : wake_(executor, 1) {}
  void Enqueue(v1::ExecInput input);
  void Wake() { wake_.try_send(boost::system::error_code()); }

  grpc::ClientContext context_;
  Channel wake_;
  v1::ExecEvent event_;
  mutable absl::Mutex mu_;
  std::deque<v1::ExecInput> writes_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  std::string process_id_ ABSL_GUARDED_BY(mu_);
  std::string output_ ABSL_GUARDED_BY(mu_);
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  ExecObserver observer_;
  std::shared_ptr<InteractiveCall> self_;  // keeps the reactor alive until OnDone
};

}  // namespace corral::sandbox
