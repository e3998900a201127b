#include "services/scheduler/episode/sandbox_placer.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "libs/async/sleep.h"
#include "services/scheduler/episode/episode_outcome.h"

namespace corral::scheduler {

namespace asio = boost::asio;

namespace {

PlaceFailure Failed(const absl::Status& status, v1::EpisodePhase phase, v1::FailureClass failure_class,
                    std::string what) {
  return PlaceFailure{status, phase, failure_class, std::move(what)};
}

}  // namespace

asio::awaitable<std::variant<Placement, PlaceFailure>> SandboxPlacer::Place(PlaceRequest r) {
  const v1::SandboxSpec& spec = r.sandbox.spec;
  const Requirements& needs = r.sandbox.needs;
  const v1::EnvironmentSpec& env = r.environment;
  auto reserved = [&r] {
    if (r.on_reserved) r.on_reserved();
  };
  // A warm sandbox of this spec, when the pool has one ready: a pop and a liveness check instead of a create.
  if (pool_ != nullptr) {
    std::optional<WarmSandbox> warm = co_await pool_->Take(spec, needs);
    if (warm) {
      reserved();
      co_return Placement{std::move(warm->slot), std::move(warm->created), true, absl::ZeroDuration()};
    }
  }
  absl::Duration setup_time;
  int attempts = 0;
  for (;;) {
    if (r.control != nullptr && r.control->stopped()) {
      PlaceFailure stopped = Failed(absl::CancelledError("stopped"), v1::EPISODE_PHASE_ACQUIRE, v1::FAILURE_CLASS_INFRA,
                                    "placing the sandbox");
      stopped.stopped = true;
      co_return stopped;
    }
    auto slot = hosts_->Reserve(needs, spec.template_key());
    if (!slot.ok()) {
      if (slot.status().code() == absl::StatusCode::kFailedPrecondition || clock_->Now() >= r.acquire_deadline) {
        const absl::Status s = slot.status().code() == absl::StatusCode::kFailedPrecondition
                                   ? slot.status()
                                   : absl::DeadlineExceededError(slot.status().message());
        co_return Failed(s, v1::EPISODE_PHASE_ACQUIRE, v1::FAILURE_CLASS_INFRA, "placing the sandbox");
      }
      co_await async::SleepFor(*clock_, absl::Milliseconds(50));
      continue;
    }
    reserved();
    const std::string address = slot->client->address();
    if (!env.image().empty() && !hosts_->HasImage(address, env.image())) {
      // The host pulls the image from its registry (a host pulls one name once at a time; later placements wait
      // for that pull). The time counts as setup, not against the acquire deadline.
      const absl::Time started = clock_->Now();
      auto pulled = co_await slot->client->PullImage(
          env.image(),
          sandbox::CallOptions{r.control, std::min(started + r.setup_timeout + absl::Seconds(10), r.hard_deadline)});
      setup_time += clock_->Now() - started;
      if (!pulled.ok()) {
        hosts_->Release(address);
        co_return Failed(pulled.status(), v1::EPISODE_PHASE_ACQUIRE, FaultOf(Step::kPullImage, pulled.status().code()),
                         absl::StrCat("pulling image ", env.image(), " on ", address));
      }
      hosts_->MarkImage(address, env.image(), pulled->digest());
    }
    if (!spec.template_key().empty() && !hosts_->HasTemplate(address, spec.template_key())) {
      v1::PrepareTemplateRequest prepare = TemplateRequestFor(env, spec, r.setup_timeout);
      const absl::Time started = clock_->Now();
      const absl::Time deadline = std::min(started + r.setup_timeout + absl::Seconds(10), r.hard_deadline);
      const std::string key = prepare.key();
      auto built =
          co_await slot->client->PrepareTemplate(std::move(prepare), sandbox::CallOptions{r.control, deadline});
      setup_time += clock_->Now() - started;
      if (!built.ok()) {
        hosts_->Release(address);
        co_return Failed(built.status(), v1::EPISODE_PHASE_SETUP, FaultOf(Step::kBuildTemplate, built.status().code()),
                         absl::StrCat("building template ", key, " on ", address));
      }
      hosts_->MarkTemplate(address, spec.template_key());
    }
    // Not cut by a stop (cancel, timeout): a create the host carried out would leave a sandbox nobody knows.
    // Created, it is the caller's, and a stop then deletes it like any other (bounded by the deadline).
    auto created = co_await slot->client->Create(spec, sandbox::CallOptions{nullptr, r.acquire_deadline + setup_time});
    if (created.ok()) {
      hosts_->Own(address, created->sandbox().sandbox_id());
      co_return Placement{*std::move(slot), *std::move(created), false, setup_time};
    }
    hosts_->Release(address);
    if (created.status().code() == absl::StatusCode::kResourceExhausted ||
        created.status().code() == absl::StatusCode::kUnavailable) {
      // Full (authoritative) or not answering: nothing more goes there until its next HostInfo says otherwise.
      hosts_->MarkRejected(address);
    }
    if (created.status().code() == absl::StatusCode::kResourceExhausted) continue;
    if (created.status().code() == absl::StatusCode::kUnavailable && ++attempts < 3 &&
        clock_->Now() < r.acquire_deadline) {
      continue;
    }
    co_return Failed(created.status(), v1::EPISODE_PHASE_ACQUIRE,
                     FaultOf(Step::kCreateSandbox, created.status().code()),
                     absl::StrCat("creating the sandbox on ", address));
  }
}

}  // namespace corral::scheduler
