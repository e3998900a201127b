// SandboxFusion's POST /run_code served by Corral: the request parsed (422 as FastAPI words it), a permit of the
// cluster-wide code limit for the request's language taken from the ratelimiter (code_exec/{language}, the limit
// the scheduler's tool executions hold too: FIFO, shared by every replica), a sandbox leased from the
// scheduler for the run alone (from the warm pool when it has one), the code run there (code_runner.h), and the
// sandbox released once the answer is out. No permit or no sandbox within `wait` is 504, the one status verl
// retries; a limiter or scheduler that refuses is 503 with its reason. Thread-safe.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "boost/asio/awaitable.hpp"
#include "libs/core/clock.h"
#include "services/ratelimiter/client/limiter_api.h"
#include "services/sandbox_api/lease_client.h"
#include "services/sandbox_api/metrics.h"
#include "services/sandbox_api/run_code.h"

namespace corral::sandbox_api {

struct HttpAnswer {
  int status = 200;
  std::string body;  // JSON
};

struct RunCodeOptions {
  std::string limit = "code_exec";  // a concurrency limit keyed by language (code_exec/{language})
  absl::Duration wait = absl::Minutes(2);
  std::string image;                          // the sandbox's image; empty: the host's own toolchains
  std::map<std::string, std::string> images;  // per language, instead of `image`
  std::string executor;                       // executor_pod_name
  RunCodeLimits limits;
};

class RunCodeService {
 public:
  // `limiter` and `metrics` may be null (no cluster limit; no metrics).
  RunCodeService(LeaseApi* leases, ratelimiter::LimiterApi* limiter, Clock* clock, RunCodeOptions options,
                 SandboxApiMetrics* metrics = nullptr)
      : leases_(leases), limiter_(limiter), clock_(clock), options_(std::move(options)), metrics_(metrics) {}

  // A call that takes longer than this is logged with where its time went.
  static constexpr absl::Duration kSlowCall = absl::Seconds(30);

  boost::asio::awaitable<HttpAnswer> RunCode(std::string body);

 private:
  // Where a call's time went, each phase from the end of the one before (zero: not reached).
  struct Phases {
    absl::Duration permit, lease, host, run;
  };
  boost::asio::awaitable<HttpAnswer> Run(RunCodeRequest request, Phases& phases);

  LeaseApi* const leases_;
  ratelimiter::LimiterApi* const limiter_;
  Clock* const clock_;
  const RunCodeOptions options_;
  SandboxApiMetrics* const metrics_;
};

}  // namespace corral::sandbox_api
