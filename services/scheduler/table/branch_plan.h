// Branching tasks (Task.branch): the shape of a group's tree, as arithmetic on the episodes' indices. The
// group's episodes are the leaves; episode i's path is i written in the mixed radix of the points' counts
// (level 0 most significant). An episode whose digits from level l on are all 0 is the head of its subtree at
// level l: it runs until that level's turn and splits there into its children, the episodes that differ from it
// in digit l only. Episode 0, the root, is the head at every level. Pure functions, no state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "corral/v1/scheduler.pb.h"

namespace corral::scheduler {

struct BranchPlan {
  std::vector<uint32_t> turns;   // per level, strictly increasing
  std::vector<uint32_t> counts;  // per level (>= 2), product = group_size

  size_t levels() const { return turns.size(); }
  // Episode i's digit at each level.
  std::vector<uint32_t> Path(uint32_t i) const;
  // The level at which episode i left its parent (its deepest non-zero digit); nullopt for the root.
  std::optional<size_t> Level(uint32_t i) const;
  // The episode whose run i continued: i with its deepest non-zero digit cleared. The root is its own.
  uint32_t Parent(uint32_t i) const;
  // The levels at which episode i splits: every level below its own (all of them for the root).
  size_t FirstOwnLevel(uint32_t i) const;
  // Episode i's children at `level` (i must be the head there): the indices that differ from i in that digit.
  std::vector<uint32_t> Children(uint32_t i, size_t level) const;

 private:
  uint32_t Stride(size_t level) const;  // the product of the counts below `level`
};

// The plan of a task's branch spec for groups of `group_size`, or INVALID_ARGUMENT naming the field (at most 4
// points, turns strictly increasing, counts >= 2 with at most one 0 that takes the rest, product = group_size).
absl::StatusOr<BranchPlan> PlanBranches(const v1::BranchSpec& spec, uint32_t group_size);

// The plan of `task` for groups of `group_size`; nullopt when it does not branch (or its spec is invalid: Submit
// refuses those).
std::optional<BranchPlan> PlanOf(const v1::Task& task, uint32_t group_size);

// Episode i's place in the tree as far as the plan tells it (root, parent, sibling index, path); the turns and
// prefix are the runner's to add.
v1::BranchInfo BranchInfoOf(const BranchPlan& plan, const std::string& batch_id, uint32_t group, uint32_t i);

// What a branching task must also be: tool_loop, no redundancy, no MCP servers (their processes are not carried
// over). `group_size` and `redundancy` are the batch's. INVALID_ARGUMENT "task '<id>': branch...".
absl::Status CheckBranching(const v1::Task& task, uint32_t group_size, uint32_t redundancy);

}  // namespace corral::scheduler
