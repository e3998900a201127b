// Branching rollouts (Task.branch): the split of a tool loop at a turn into children that share its conversation
// and its sandbox as they are, each an episode of its own (docs/branching.md).
#pragma once

#include <cstdint>
#include <optional>

#include "boost/asio/awaitable.hpp"
#include "boost/json/array.hpp"
#include "services/scheduler/episode/attempt.h"

namespace corral::scheduler {

// Called by the tool loop after the model's reply at `turn` (`before_reply`: the conversation the reply answered;
// `last`: the conversation ends after this turn). Splits at every level of the plan that is due: its turn has
// come, or the conversation ends before it would. Each split takes the level's children from the table, forks
// the sandbox for them (persistent tools are stopped first: no process is carried over), takes the session's
// calls so far as their shared prefix, and starts them. A child that gets no fork ends with why. The parent goes
// on either way.
boost::asio::awaitable<void> SplitIfDue(Attempt& a, const boost::json::array& before_reply, int64_t turn, bool last);

// The branch fields of a branching attempt's result: its place in the tree, the turns of its line's splits, and
// how many calls of its trajectory its ancestors made.
void SetBranchInfo(const Attempt& a, v1::EpisodeResult& result);

}  // namespace corral::scheduler
