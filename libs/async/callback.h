// A callback-style operation as an awaitable: `co_await AwaitCallback<T>(start)` calls `start(done)`, which
// starts the operation and arranges for `done(T)` to be called exactly once (on any thread); the coroutine then
// resumes on its own executor with that value. gRPC's callback API and the journal's commits meet coroutines
// here.
#pragma once

#include <memory>
#include <utility>

#include "boost/asio/associated_executor.hpp"
#include "boost/asio/async_result.hpp"
#include "boost/asio/awaitable.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/use_awaitable.hpp"

namespace corral::async {

template <class T, class Start>
boost::asio::awaitable<T> AwaitCallback(Start start) {
  return boost::asio::async_initiate<decltype(boost::asio::use_awaitable), void(T)>(
      [start = std::move(start)](auto handler) mutable {
        using Handler = decltype(handler);
        auto h = std::make_shared<Handler>(std::move(handler));
        start([h](T value) {
          auto executor = boost::asio::get_associated_executor(*h);
          boost::asio::post(executor, [h, value = std::move(value)]() mutable { (*h)(std::move(value)); });
        });
      },
      boost::asio::use_awaitable);
}

}  // namespace corral::async
