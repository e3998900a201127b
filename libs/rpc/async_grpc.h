// gRPC's callback API as awaitables for a service's coroutines (the scheduler's, the sandbox API's): a unary
// call, a server stream read to its end, and a client stream written from a list. Each completes on the awaiting
// coroutine's executor, so a gRPC thread never runs the caller's code. Every call takes a CallScope: its
// deadline, the bearer token, and an interrupt that cancels the call when its StopSignal stops (an episode that
// is stopped).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "boost/asio/associated_executor.hpp"
#include "boost/asio/async_result.hpp"
#include "boost/asio/awaitable.hpp"
#include "boost/asio/dispatch.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "grpcpp/client_context.h"
#include "grpcpp/support/client_callback.h"
#include "libs/async/callback.h"
#include "libs/async/stop_signal.h"
#include "libs/core/clock.h"
#include "libs/rpc/auth.h"

namespace corral::rpc {

namespace asio = boost::asio;

// The context of one call: deadline, token, and cancellation when `control` is stopped. Not movable (gRPC holds
// the context's address during the call).
class CallScope {
 public:
  CallScope(async::StopSignal* control, absl::Time deadline, const std::string& token)
      : interrupt_(control, [this] { context_.TryCancel(); }) {
    // In process time (libs/core/clock.h): what is left of it, so a step of the wall clock does not move it.
    if (deadline != absl::InfiniteFuture()) context_.set_deadline(ToSystemDeadline(deadline));
    AttachBearer(context_, token);
  }
  grpc::ClientContext* context() { return &context_; }

 private:
  grpc::ClientContext context_;  // before interrupt_: the interrupt may fire as soon as it is registered
  async::ScopedInterrupt interrupt_;
};

// Calls `start(done)` — which starts a callback-API call that calls `done(status)` once — and resumes the
// coroutine on its own executor with that status.
template <class Start>
asio::awaitable<grpc::Status> AwaitGrpc(Start start) {
  return async::AwaitCallback<grpc::Status>(std::move(start));
}

// Reads a server stream to its end, handing each message to `on_message` (on a gRPC thread: keep it short).
template <class Response>
class StreamReader final : public grpc::ClientReadReactor<Response> {
 public:
  StreamReader(std::function<void(const Response&)> on_message, std::function<void(grpc::Status)> done)
      : on_message_(std::move(on_message)), done_(std::move(done)) {}
  void Begin() {
    this->StartRead(&message_);
    this->StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    on_message_(message_);
    this->StartRead(&message_);
  }
  void OnDone(const grpc::Status& status) override {
    auto done = std::move(done_);
    delete this;
    done(status);
  }

 private:
  Response message_;
  std::function<void(const Response&)> on_message_;
  std::function<void(grpc::Status)> done_;
};

// Writes `requests` on a client stream, half-closes, and waits for the response.
template <class Request>
class StreamWriter final : public grpc::ClientWriteReactor<Request> {
 public:
  StreamWriter(std::vector<Request> requests, std::function<void(grpc::Status)> done)
      : requests_(std::move(requests)), done_(std::move(done)) {}
  // The first write is started before the call: once StartCall returns, a cancelled call (a stopped episode)
  // may reach OnDone — and delete this — on another thread unless an operation is pending.
  void Begin() {
    Next();
    this->StartCall();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return;  // the call failed; OnDone follows
    Next();
  }
  void OnDone(const grpc::Status& status) override {
    auto done = std::move(done_);
    delete this;
    done(status);
  }

 private:
  void Next() {
    if (next_ < requests_.size()) {
      this->StartWrite(&requests_[next_++]);
    } else {
      this->StartWritesDone();
    }
  }
  std::vector<Request> requests_;
  size_t next_ = 0;
  std::function<void(grpc::Status)> done_;
};

}  // namespace corral::rpc
