// One running episode attempt as the driver and the runners share it: the task, the deadlines, the proxy
// session, the sandbox, and the result being filled in. Used by one coroutine at a time (not thread-safe).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "boost/json/array.hpp"
#include "corral/v1/scheduler.pb.h"
#include "libs/core/clock.h"
#include "services/ratelimiter/client/limiter_api.h"
#include "services/sandbox_host/client/host_api.h"
#include "services/sandbox_host/client/output_tail.h"
#include "services/scheduler/episode/branch_state.h"
#include "services/scheduler/episode/episode_outcome.h"
#include "services/scheduler/episode/episode_usage.h"
#include "services/scheduler/episode/mcp_state.h"
#include "services/scheduler/episode/pause_ledger.h"
#include "services/scheduler/episode/resident_registry.h"
#include "services/scheduler/episode/runner_options.h"
#include "services/scheduler/remote/host_registry.h"
#include "services/scheduler/remote/proxy_api.h"
#include "services/scheduler/table/episode_table.h"

namespace corral::scheduler {

class EnvBoard;

struct Attempt {
  EpisodeTicket ticket;
  const v1::Task& task() const { return *ticket.task; }
  RunControl* control() const { return ticket.control.get(); }
  const RunnerOptions* options = nullptr;
  ratelimiter::LimiterApi* limiter = nullptr;  // null: no limits
  Clock* clock = nullptr;

  // Generation pauses (PauseGeneration): not counted against the episode and agent timeouts. Null: none.
  const PauseLedger* pauses = nullptr;
  // Trainer-driven environment episodes meet their trainer's calls here. Null: none can open.
  EnvBoard* envs = nullptr;

  // Branching tasks (ticket.branch_plan).
  BranchState branching;

  v1::EpisodeResult result;
  absl::Time start;
  // Read through EpisodeDeadline() and AgentDeadline(), which move them later by the pauses.
  absl::Time episode_deadline = absl::InfiniteFuture();
  bool batch_deadline_binds = false;  // the episode deadline is the batch's (wall-clock: pauses do not move it)
  absl::Time agent_start = absl::InfiniteFuture();
  absl::Duration agent_timeout = absl::InfiniteDuration();

  std::shared_ptr<ProxyApi> proxy;
  v1::OpenSessionResponse session;
  std::string model;  // the model the episode's calls name: the task's, else the default, else the proxy's choice
  // OpenSession was sent: the proxy may hold the session even if the call failed on our side (a stop cancels
  // it mid-flight), so it is closed either way.
  bool session_requested = false;
  BaseUrl base;

  std::function<void()> on_reserved;  // called when a sandbox slot is reserved (and at the end, harmlessly)
  std::optional<Slot> slot;
  std::string sandbox_id;
  // SEPARATE_UID: the verifier's own sandbox, a fork of `sandbox_id`, deleted beside it as the attempt ends.
  std::string verifier_sandbox_id;
  std::string workdir;  // for commands: "/workspace" or "" (the home)
  std::string home;     // $HOME as the sandbox's processes see it (Sandbox.home)

  // `path` as the sandbox's processes see it: an absolute path as it is, a relative one under the home.
  std::string InSandbox(const std::string& path) const;

  // Processes kept open in the sandbox (persistent tools, MCP servers, the environment relay): stopped when
  // the attempt ends.
  ResidentProcesses residents;
  // MCP tool servers (Task.mcp_servers).
  McpState mcp;

  std::string final_message;         // the last assistant message's text (single_turn, tool_loop)
  sandbox::OutputTail output{4096};  // agent output, or the tool outputs (tool_loop)
  absl::Duration tools_time;
  std::map<std::string, ToolTally> tools_by_name;
  // CLEAN_ENV: the sandbox's CPU time as the verifier began (what it used is the difference at the end).
  std::optional<absl::Duration> cpu_before_verifier;

  // A tool call of `name` ran for `took`: tool time, in all and per tool.
  void ToolRan(const std::string& name, absl::Duration took) {
    tools_time += took;
    ToolTally& tally = tools_by_name[name];
    ++tally.calls;
    tally.time += took;
  }

  // A phase's deadline: now + `timeout` (the task's, else the default), capped by the episode deadline.
  absl::Time Deadline(const google::protobuf::Duration& task_timeout, absl::Duration fallback) const;
  // Generation paused since `from`, up to now.
  absl::Duration PausedSince(absl::Time from) const;
  bool Paused() const { return pauses != nullptr && pauses->paused(); }
  // The episode deadline, later by the pauses since the episode began (a batch deadline does not move).
  absl::Time EpisodeDeadline() const;
  // The agent phase begins now, with its timeout (the task's, else the default).
  void StartAgentPhase();
  // The agent phase's timeout after it began, later by the pauses since, capped by EpisodeDeadline().
  absl::Time AgentDeadline() const;
  absl::Duration Timeout(const google::protobuf::Duration& task_timeout, absl::Duration fallback) const;
  sandbox::CallOptions Call(absl::Time deadline) const { return sandbox::CallOptions{control(), deadline}; }
  // A failure from a call's status: DEADLINE_EXCEEDED becomes TIMEOUT in `phase` (EPISODE or DEADLINE when the
  // episode deadline passed), UNAVAILABLE and CANCELLED are infra, anything else `failure_class`.
  Failure FromStatus(const absl::Status& s, v1::EpisodePhase phase, v1::FailureClass failure_class,
                     const std::string& what) const;
};

}  // namespace corral::scheduler
