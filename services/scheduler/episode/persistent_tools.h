// Persistent tools (ToolSpec.persistent): one bash or python process per episode and tool serves every call of
// that tool, so state survives between calls. Each call is written to the process's stdin (NUL-terminated); a
// small driver runs it (bash: eval in the shell itself, so cwd, variables and background jobs persist; python:
// exec in one globals dict, echoing the last expression like Jupyter) and prints a per-process random marker
// after it. A call past its timeout is interrupted with SIGINT; a process that does not recover is replaced.
#pragma once

#include <string>
#include <variant>

#include "boost/asio/awaitable.hpp"
#include "services/scheduler/episode/attempt.h"

namespace corral::scheduler {

// The tool message for one call (`code`: the bash command or the python source), or an infra failure (the
// sandbox is gone).
boost::asio::awaitable<std::variant<std::string, Failure>> RunPersistent(Attempt& a, const v1::ToolSpec& spec,
                                                                         const std::string& code,
                                                                         absl::Duration timeout, size_t limit);

}  // namespace corral::scheduler
