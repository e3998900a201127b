// Getting a sandbox for a spec, in one place for everything that needs one (an episode's acquire phase, a
// leased sandbox): a warm one from the pool when it has one, else a slot reserved on the best host (waiting for
// room until the acquire deadline), the image pulled and the template built there when the host lacks them, and
// the sandbox created, retried elsewhere when the host turns out full or away. The slot is reserved in the
// HostRegistry (it counts against the cluster's capacity until released) and the sandbox owned there.
#pragma once

#include <functional>
#include <string>
#include <variant>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "boost/asio/awaitable.hpp"
#include "corral/v1/scheduler.pb.h"
#include "libs/core/clock.h"
#include "services/scheduler/episode/sandbox_request.h"
#include "services/scheduler/remote/host_registry.h"
#include "services/scheduler/remote/warm_pool.h"
#include "services/scheduler/table/run_control.h"

namespace corral::scheduler {

struct PlaceRequest {
  SandboxRequest sandbox;
  v1::EnvironmentSpec environment;  // the image and the template's setup
  absl::Time acquire_deadline;      // for room and the create; time spent pulling and building is added to it
  absl::Duration setup_timeout;     // a pull or a template build
  absl::Time hard_deadline = absl::InfiniteFuture();  // no call goes past it (the episode's deadline)
  RunControl* control = nullptr;                      // a stop ends the waits and cuts the calls; null: none
  std::function<void()> on_reserved;                  // called once a slot is held (may be empty)
};

// A sandbox placed: its slot (release it with HostRegistry::Release once the sandbox is deleted) and the host's
// answer.
struct Placement {
  Slot slot;
  v1::CreatedSandbox created;
  bool warm = false;
  absl::Duration setup_time;  // pulling the image and building the template
};

// Why there is none: the call's status, the step it failed in and whose fault it is.
struct PlaceFailure {
  absl::Status status;
  v1::EpisodePhase phase = v1::EPISODE_PHASE_ACQUIRE;  // SETUP for a template build
  v1::FailureClass failure_class = v1::FAILURE_CLASS_INFRA;
  std::string what;      // "creating the sandbox on HOST", ...
  bool stopped = false;  // `control` was stopped while waiting
};

class SandboxPlacer {
 public:
  // `pool` may be null (no warm pool).
  SandboxPlacer(HostRegistry* hosts, WarmPool* pool, Clock* clock) : hosts_(hosts), pool_(pool), clock_(clock) {}

  boost::asio::awaitable<std::variant<Placement, PlaceFailure>> Place(PlaceRequest request);

 private:
  HostRegistry* const hosts_;
  WarmPool* const pool_;
  Clock* const clock_;
};

}  // namespace corral::scheduler
