#include "services/sandbox_api/run_code_service.h"

#include <optional>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "boost/asio/this_coro.hpp"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "libs/async/spawn.h"
#include "libs/core/logging.h"
#include "services/sandbox_api/code_runner.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox_api {

namespace asio = boost::asio;

namespace {

constexpr char kOwner[] = "run_code";

// FastAPI's shape for an error that is not a validation error: {"detail": message}.
HttpAnswer Detail(int status, const std::string& message) {
  boost::json::object body;
  body["detail"] = message;
  return HttpAnswer{status, boost::json::serialize(body)};
}

// A call that found no room in time is worth retrying (504, which verl retries); anything else says why not.
HttpAnswer Unavailable(const absl::Status& s, const std::string& what) {
  const bool retry = s.code() == absl::StatusCode::kDeadlineExceeded ||
                     s.code() == absl::StatusCode::kResourceExhausted || s.code() == absl::StatusCode::kUnavailable;
  return Detail(retry ? 504 : 503, absl::StrCat(what, ": ", s.message()));
}

// The answer's top-level status ("Success", "Failed", "SandboxError").
std::string AnswerStatus(absl::string_view answer) {
  if (!absl::ConsumePrefix(&answer, R"({"status":")")) return "unknown";
  return std::string(answer.substr(0, answer.find('"')));
}

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

asio::awaitable<void> ReleaseLater(LeaseApi* leases, std::string lease_id) {
  absl::Status s = co_await leases->Release(lease_id, kOwner);
  if (!s.ok() && s.code() != absl::StatusCode::kNotFound) {
    spdlog::warn("/run_code: releasing lease {}: {} (it expires on its own)", lease_id, s);
  }
}

}  // namespace

asio::awaitable<HttpAnswer> RunCodeService::RunCode(std::string body) {
  const absl::Time start = clock_->Now();
  std::variant<RunCodeRequest, RunCodeRefusal> parsed = ParseRunCode(body, options_.limits);
  body.clear();
  HttpAnswer answer;
  Phases phases;
  if (auto* refusal = std::get_if<RunCodeRefusal>(&parsed)) {
    answer = HttpAnswer{refusal->http_status, std::move(refusal->body)};
  } else {
    answer = co_await Run(std::get<RunCodeRequest>(std::move(parsed)), phases);
  }
  const std::string status = answer.status == 200 ? AnswerStatus(answer.body) : std::to_string(answer.status);
  const absl::Duration took = clock_->Now() - start;
  if (metrics_ != nullptr) {
    metrics_->run_code.Add({{"status", status}}).Increment();
    metrics_->run_code_seconds.Observe(Seconds(took));
  }
  if (took > kSlowCall) {
    spdlog::warn("/run_code: answered {} after {} (permit {}, sandbox {}, host {}, run {}){}{}", status,
                 absl::FormatDuration(took), absl::FormatDuration(phases.permit), absl::FormatDuration(phases.lease),
                 absl::FormatDuration(phases.host), absl::FormatDuration(phases.run), answer.status == 200 ? "" : ": ",
                 answer.status == 200 ? "" : answer.body);
  }
  co_return answer;
}

asio::awaitable<HttpAnswer> RunCodeService::Run(RunCodeRequest request, Phases& phases) {
  const Toolchain* toolchain = ToolchainFor(request.language);
  if (toolchain == nullptr) {
    co_return HttpAnswer{200, SandboxErrorAnswer(UnavailableMessage(request.language, nullptr), options_.executor)};
  }
  const absl::Time start = clock_->Now();
  const absl::Time wait_until = start + options_.wait;
  ratelimiter::Permit permit;
  absl::Status refused;
  if (limiter_ != nullptr) {
    std::string limit = options_.limit, key = request.language;
    auto acquired = co_await limiter_->Acquire(std::move(limit), std::move(key), options_.wait, nullptr);
    if (acquired.ok()) {
      permit = *std::move(acquired);
    } else {
      refused = acquired.status();
    }
  }
  const absl::Time permitted = clock_->Now();
  phases.permit = permitted - start;
  if (!refused.ok()) co_return Unavailable(refused, absl::StrCat("no ", options_.limit, " permit"));
  if (metrics_ != nullptr) {
    metrics_->permit_wait_seconds.Observe(Seconds(permitted - start));
    metrics_->running.Increment();
  }
  struct Running {
    SandboxApiMetrics* metrics;
    ~Running() {
      if (metrics != nullptr) metrics->running.Decrement();
    }
  } running{metrics_};

  const absl::Duration run_time = absl::Seconds(request.compile_timeout + request.run_timeout);
  v1::LeaseSandboxRequest lease_request;
  auto image = options_.images.find(request.language);
  lease_request.mutable_environment()->set_image(image != options_.images.end() ? image->second : options_.image);
  lease_request.mutable_environment()->set_network_policy(v1::NETWORK_POLICY_NONE);
  lease_request.set_owner(kOwner);
  (*lease_request.mutable_labels())["corral.api"] = "run_code";
  ToProto(run_time + absl::Minutes(1), lease_request.mutable_ttl());
  ToProto(std::max(wait_until - permitted, absl::ZeroDuration()), lease_request.mutable_wait());
  const absl::Time lease_deadline = wait_until + absl::Seconds(30);
  auto lease = co_await leases_->Lease(std::move(lease_request), lease_deadline);
  const absl::Time leased = clock_->Now();
  phases.lease = leased - permitted;
  if (!lease.ok()) co_return Unavailable(lease.status(), "no sandbox");
  if (metrics_ != nullptr) metrics_->lease_seconds.Observe(Seconds(phases.lease));

  absl::StatusOr<std::shared_ptr<sandbox::HostApi>> host = leases_->Host(*lease);
  std::string body;
  if (!host.ok()) {
    body = SandboxErrorAnswer(std::string(host.status().message()), options_.executor);
  } else {
    co_await leases_->AwaitHost(*lease, absl::Seconds(5));  // this replica's channel, if the host just restarted
    const absl::Time reached = clock_->Now();
    phases.host = reached - leased;
    const absl::Time run_deadline = reached + run_time + absl::Seconds(30);
    std::string sandbox_id = lease->sandbox_id(), executor = options_.executor;
    body = co_await sandbox_api::RunCode(**host, std::move(sandbox_id), std::move(request), run_deadline,
                                         std::move(executor));
    phases.run = clock_->Now() - reached;
  }
  permit.Release();
  // The answer does not wait for the sandbox's deletion.
  auto executor = co_await asio::this_coro::executor;
  async::Spawn(executor, ReleaseLater(leases_, lease->lease_id()), "releasing a lease");
  co_return HttpAnswer{200, std::move(body)};
}

}  // namespace corral::sandbox_api
