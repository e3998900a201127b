// A completion token for co_spawn of a detached coroutine that logs what it threw, instead of dropping it
// silently as asio::detached does: `asio::co_spawn(executor, Loop(), LogExceptions("the health loop"))`.
#pragma once

#include <exception>
#include <string>

#include "spdlog/spdlog.h"

namespace corral::http {

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

}  // namespace corral::http
