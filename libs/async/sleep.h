// Sleeps for coroutines. On a Clock (libs/core/clock.h): the service's RealClock, or a test's FakeClock that
// only moves when the test advances it — so code that waits, polls or backs off is tested in milliseconds. Every
// sleep ends early, without error, when its operation is cancelled (a `||` race it lost, a cancelled spawn).
#pragma once

#include "absl/time/time.h"
#include "boost/asio/awaitable.hpp"
#include "libs/core/clock.h"

namespace corral::async {

// Waits until `clock` reads `when` (returns at once when it already does). The clock's timer wakes the
// coroutine on its own executor.
boost::asio::awaitable<void> SleepUntil(Clock& clock, absl::Time when);
boost::asio::awaitable<void> SleepFor(Clock& clock, absl::Duration d);
// Waits `d` of real time on an asio timer (code that has no Clock: load generators, test fixtures).
boost::asio::awaitable<void> SleepFor(absl::Duration d);

}  // namespace corral::async
