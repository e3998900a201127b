// The completion token for an awaited operation whose error is a value, not an exception:
// `auto [ec, n] = co_await stream.async_read_some(buffer, async::kUseTuple);`
#pragma once

#include "boost/asio/as_tuple.hpp"
#include "boost/asio/use_awaitable.hpp"

namespace corral::async {

inline constexpr auto kUseTuple = boost::asio::as_tuple(boost::asio::use_awaitable);

}  // namespace corral::async
