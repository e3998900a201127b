// Detached coroutines that never fail silently. `Spawn(executor, Loop(), "the health loop")` is co_spawn with a
// completion that logs what the coroutine threw (asio::detached drops it). Nothing in Corral spawns detached any
// other way: scripts/check-code refuses asio::detached outside this file.
#pragma once

#include <exception>
#include <string>
#include <utility>

#include "boost/asio/co_spawn.hpp"
#include "spdlog/spdlog.h"

namespace corral::async {

// The completion token: logs an exception as "<what> failed: <message>".
inline auto LogExceptions(std::string what) {
  return [what = std::move(what)](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      spdlog::error("{} failed: {}", what, x.what());
    } catch (...) {
      spdlog::error("{} failed with an unknown exception", what);
    }
  };
}

// One pass of a loop that must outlive a bad pass (the dispatcher, a tick): runs `pass` and logs what it throws
// as "<what> failed: <message>; it goes on" instead of ending the loop. False when it threw.
template <typename Pass>
bool SurvivePass(const std::string& what, Pass&& pass) {
  try {
    std::forward<Pass>(pass)();
    return true;
  } catch (const std::exception& x) {
    spdlog::error("{} failed: {}; it goes on", what, x.what());
  } catch (...) {
    spdlog::error("{} failed with an unknown exception; it goes on", what);
  }
  return false;
}

// On an executor or an execution context (an io_context), as co_spawn.
template <typename ExecutorOrContext, typename Awaitable>
void Spawn(ExecutorOrContext&& where, Awaitable awaitable, std::string what) {
  boost::asio::co_spawn(std::forward<ExecutorOrContext>(where), std::move(awaitable), LogExceptions(std::move(what)));
}

}  // namespace corral::async
