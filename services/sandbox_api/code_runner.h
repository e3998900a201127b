// Runs one /run_code request (run_code.h) in a sandbox it is handed: the code and files written to a directory of
// their own, then each command (compile, run) as one process under its timeout and memory_limit_MB (the
// address-space limit) — the first one looking the language's programs up before anything runs — with stdout and
// stderr streamed apart and their first 1 MiB each kept (as SandboxFusion reads them), and the files asked for
// read back. Talks to the sandbox's host through sandbox::HostApi, the
// scheduler's client of the sandbox-host API; it does not choose, create or delete the sandbox.
#pragma once

#include <string>

#include "absl/time/time.h"
#include "boost/asio/awaitable.hpp"
#include "services/sandbox_api/run_code.h"
#include "services/sandbox_host/client/host_api.h"

namespace corral::sandbox_api {

inline constexpr size_t kMaxStreamBytes = 1 << 20;    // stdout and stderr each, as SandboxFusion reads them
inline constexpr size_t kMaxFetchedBytes = 16 << 20;  // one fetched file

// The answer body (always a 200 answer: a failure to run is a SandboxError in it). `executor` is reported as
// executor_pod_name. Every call made to the host ends by `deadline`.
boost::asio::awaitable<std::string> RunCode(sandbox::HostApi& host, std::string sandbox_id, RunCodeRequest request,
                                            absl::Time deadline, std::string executor = "");

}  // namespace corral::sandbox_api
