#include "libs/async/sleep.h"

#include <atomic>
#include <memory>
#include <optional>

#include "boost/asio/as_tuple.hpp"
#include "boost/asio/async_result.hpp"
#include "boost/asio/bind_cancellation_slot.hpp"
#include "boost/asio/dispatch.hpp"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"

namespace corral::async {

namespace asio = boost::asio;

namespace {

// One pending wait: completed once, by the clock's timer or by a cancellation, whichever comes first. The
// completion is posted to the waiting coroutine's executor (the timer fires on the clock's thread).
template <typename Handler>
struct Wait {
  explicit Wait(Handler h)
      : handler(std::move(h)), work(asio::make_work_guard(asio::get_associated_executor(*handler))) {}

  void Complete() {
    if (done.exchange(true)) return;
    auto executor = asio::get_associated_executor(*handler);
    asio::post(executor, [self = this]() mutable {
      auto h = std::move(*self->handler);
      self->handler.reset();
      asio::get_associated_cancellation_slot(h).clear();
      self->work.reset();
      self->owner.reset();  // may destroy *this: nothing below touches it
      std::move(h)();
    });
  }

  std::optional<Handler> handler;
  asio::executor_work_guard<asio::associated_executor_t<Handler>> work;
  std::atomic<bool> done{false};
  Clock::TimerId timer = 0;
  std::shared_ptr<Wait> owner;  // keeps the wait alive until its completion ran
};

template <typename Token>
auto AsyncWaitUntil(Clock& clock, absl::Time when, Token&& token) {
  return asio::async_initiate<Token, void()>(
      [&clock, when](auto handler) {
        using W = Wait<decltype(handler)>;
        auto slot = asio::get_associated_cancellation_slot(handler);
        auto wait = std::make_shared<W>(std::move(handler));
        wait->owner = wait;
        W* raw = wait.get();
        raw->timer = clock.RunAt(when, [raw] { raw->Complete(); });
        if (slot.is_connected()) {
          slot.assign([raw, &clock](asio::cancellation_type) {
            if (clock.Cancel(raw->timer)) raw->Complete();
          });
        }
      },
      token);
}

}  // namespace

asio::awaitable<void> SleepUntil(Clock& clock, absl::Time when) {
  if (clock.Now() >= when) co_return;
  co_await AsyncWaitUntil(clock, when, asio::use_awaitable);
}

asio::awaitable<void> SleepFor(Clock& clock, absl::Duration d) {
  if (d <= absl::ZeroDuration()) co_return;
  co_await SleepUntil(clock, clock.Now() + d);
}

asio::awaitable<void> SleepFor(absl::Duration d) {
  if (d <= absl::ZeroDuration()) co_return;
  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_after(absl::ToChronoNanoseconds(d));
  co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
}

}  // namespace corral::async
