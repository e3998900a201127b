// What branching (Task.branch, docs/branching.md) adds to an attempt: its place in the tree, the next level it
// splits at, what it took over from its parent, and who starts its children. The driver implements ChildStarter;
// branching.cc splits through it, so neither includes the other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "boost/json/array.hpp"
#include "corral/v1/scheduler.pb.h"
#include "services/scheduler/episode/episode_outcome.h"
#include "services/scheduler/remote/host_registry.h"
#include "services/scheduler/table/episode_table.h"

namespace corral::scheduler {

// What a child takes over from its parent at the split.
struct BranchStart {
  boost::json::array messages;               // the conversation before the turn the child samples anew
  int64_t turn = 0;                          // that turn
  v1::Trajectory prefix;                     // its ancestors' calls (CALLS form)
  v1::BranchInfo info;                       // its place in the tree, with the turns of the splits so far
  uint32_t llm_calls = 0, tool_calls = 0;    // made by its ancestors
  absl::Time episode_deadline, agent_start;  // the parent's: the line's time runs on
  // Where it runs: its fork, on the parent's host; or why it has none (it ends with that failure).
  std::optional<Slot> slot;
  v1::Sandbox sandbox;
  std::string workdir;
  std::optional<Failure> failure;
  // The parent's resident processes the fork carried into its sandbox (fork-ready ones): the child takes up
  // each under the same key.
  struct Carried {
    std::string key, process_id, marker;
  };
  std::vector<Carried> carried;
};

// Starts the children of a split (the episode driver).
class ChildStarter {
 public:
  virtual ~ChildStarter() = default;
  // The children of `parent` at `level`, from the table; empty when the parent's episode ended meanwhile.
  virtual std::vector<EpisodeTicket> Branch(const EpisodeTicket& parent, size_t level) = 0;
  // Starts a child with what its parent handed over: its fork (owned from now on) or why it has none.
  virtual void StartChild(EpisodeTicket ticket, std::shared_ptr<const BranchStart> start) = 0;
};

// A branching attempt's state (ticket.branch_plan set); empty otherwise.
struct BranchState {
  v1::BranchInfo info;  // its place in the tree, with the turns its line split at so far
  size_t next_level = 0;
  std::shared_ptr<const BranchStart> resume;  // where it started (a child; null for the group's root)
  ChildStarter* children = nullptr;
};

}  // namespace corral::scheduler
