#include "services/sandbox_host/client/interactive.h"

#include "absl/strings/str_cat.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/experimental/awaitable_operators.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "libs/core/clock.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/status_conversion.h"

namespace corral::sandbox {

namespace asio = boost::asio;

asio::awaitable<absl::StatusOr<std::shared_ptr<InteractiveProcess>>> InteractiveCall::Start(v1::SandboxHost::Stub* stub,
                                                                                            const std::string& token,
                                                                                            v1::ExecInput first,
                                                                                            ExecObserver observer) {
  auto executor = co_await asio::this_coro::executor;
  std::shared_ptr<InteractiveCall> p(new InteractiveCall(executor));
  p->self_ = p;
  p->observer_ = std::move(observer);
  AttachBearer(p->context_, token);
  stub->async()->ExecInteractive(&p->context_, p.get());
  p->Enqueue(std::move(first));
  p->StartRead(&p->event_);
  p->StartCall();
  // Wait for `started` (or the end of the call).
  while (true) {
    {
      absl::MutexLock lock(&p->mu_);
      if (p->started_) break;
      if (p->done_)
        co_return FromGrpcStatus(
            p->status_.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "the process ended at once") : p->status_);
    }
    (void)co_await p->wake_.async_receive(asio::as_tuple(asio::use_awaitable));
  }
  co_return p;
}

std::string InteractiveCall::process_id() const {
  absl::MutexLock lock(&mu_);
  return process_id_;
}

void InteractiveCall::Enqueue(v1::ExecInput input) {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  writes_.push_back(std::move(input));
  if (!writing_) {
    writing_ = true;
    StartWrite(&writes_.front());
  }
}

void InteractiveCall::Write(std::string data) {
  v1::ExecInput input;
  input.set_stdin(std::move(data));
  Enqueue(std::move(input));
}

void InteractiveCall::Signal(int signal) {
  v1::ExecInput input;
  input.set_signal(signal);
  Enqueue(std::move(input));
}

void InteractiveCall::CloseStdin() {
  v1::ExecInput input;
  input.mutable_close_stdin();
  Enqueue(std::move(input));
}

void InteractiveCall::Stop() { context_.TryCancel(); }

void InteractiveCall::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writes_.pop_front();
  if (!ok) {
    writes_.clear();
    writing_ = false;
    return;
  }
  if (writes_.empty()) {
    writing_ = false;
  } else {
    StartWrite(&writes_.front());
  }
}

void InteractiveCall::OnReadDone(bool ok) {
  if (!ok) return;  // OnDone follows
  if (observer_.on_event) observer_.on_event(event_);
  {
    absl::MutexLock lock(&mu_);
    if (event_.has_started()) {
      started_ = true;
      process_id_ = event_.started().process_id();
    }
    if (!event_.stdout().empty()) output_ += event_.stdout();
    if (!event_.stderr().empty()) output_ += event_.stderr();
    // A call that floods its output keeps bounded memory: the middle goes (the marker comes at the end).
    constexpr size_t kMax = 4 << 20, kKeep = 1 << 20;
    if (output_.size() > kMax) {
      output_ = absl::StrCat(output_.substr(0, kKeep), "\n...[", output_.size() - 2 * kKeep, " bytes elided]...\n",
                             output_.substr(output_.size() - kKeep));
    }
  }
  Wake();
  StartRead(&event_);
}

void InteractiveCall::OnDone(const grpc::Status& status) {
  std::shared_ptr<InteractiveCall> self;
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
    status_ = status;
    self = std::move(self_);
  }
  if (observer_.on_done) observer_.on_done(FromGrpcStatus(status));
  Wake();
}

asio::awaitable<InteractiveProcess::Output> InteractiveCall::ReadUntil(const std::string& marker, absl::Time deadline) {
  auto executor = co_await asio::this_coro::executor;
  asio::steady_timer timer(executor);
  timer.expires_at(asio::steady_timer::clock_type::now() +
                   absl::ToChronoNanoseconds(std::max(absl::ZeroDuration(), deadline - ProcessNow())));
  while (true) {
    Output out;
    {
      absl::MutexLock lock(&mu_);
      const size_t at = output_.find(marker);
      if (at != std::string::npos) {
        out.text = output_.substr(0, at);
        out.marked = true;
        output_.erase(0, at + marker.size());
        co_return out;
      }
      if (done_ || ProcessNow() >= deadline) {
        out.text = std::move(output_);
        output_.clear();
        out.ended = done_;
        co_return out;
      }
    }
    using namespace asio::experimental::awaitable_operators;
    (void)co_await (wake_.async_receive(asio::as_tuple(asio::use_awaitable)) ||
                    timer.async_wait(asio::as_tuple(asio::use_awaitable)));
  }
}

}  // namespace corral::sandbox
