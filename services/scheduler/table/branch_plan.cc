#include "services/scheduler/table/branch_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "services/scheduler/table/submission.h"

namespace corral::scheduler {

namespace {

constexpr int kMaxBranchPoints = 4;

}  // namespace

uint32_t BranchPlan::Stride(size_t level) const {
  uint32_t stride = 1;
  for (size_t l = level + 1; l < counts.size(); ++l) stride *= counts[l];
  return stride;
}

std::vector<uint32_t> BranchPlan::Path(uint32_t i) const {
  std::vector<uint32_t> path(levels());
  for (size_t l = levels(); l-- > 0;) {
    path[l] = i % counts[l];
    i /= counts[l];
  }
  return path;
}

std::optional<size_t> BranchPlan::Level(uint32_t i) const {
  const std::vector<uint32_t> path = Path(i);
  for (size_t l = levels(); l-- > 0;) {
    if (path[l] != 0) return l;
  }
  return std::nullopt;
}

uint32_t BranchPlan::Parent(uint32_t i) const {
  const std::optional<size_t> level = Level(i);
  if (!level) return i;
  return i - Path(i)[*level] * Stride(*level);
}

size_t BranchPlan::FirstOwnLevel(uint32_t i) const {
  const std::optional<size_t> level = Level(i);
  return level ? *level + 1 : 0;
}

std::vector<uint32_t> BranchPlan::Children(uint32_t i, size_t level) const {
  std::vector<uint32_t> out;
  for (uint32_t d = 1; d < counts[level]; ++d) out.push_back(i + d * Stride(level));
  return out;
}

v1::BranchInfo BranchInfoOf(const BranchPlan& plan, const std::string& batch_id, uint32_t group, uint32_t i) {
  v1::BranchInfo info;
  info.set_root_episode_id(EpisodeId(batch_id, group, 0));
  const std::vector<uint32_t> path = plan.Path(i);
  for (uint32_t d : path) info.add_path(d);
  if (const std::optional<size_t> level = plan.Level(i)) {
    info.set_parent_episode_id(EpisodeId(batch_id, group, plan.Parent(i)));
    info.set_sibling_index(path[*level]);
  }
  return info;
}

absl::StatusOr<BranchPlan> PlanBranches(const v1::BranchSpec& spec, uint32_t group_size) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(absl::StrCat("branch.", what)); };
  if (spec.at().empty()) return bad("at needs at least one branch point");
  if (spec.at_size() > kMaxBranchPoints) return bad(absl::StrCat("at has more than ", kMaxBranchPoints, " points"));
  BranchPlan plan;
  int open = -1;
  uint64_t product = 1;
  for (int l = 0; l < spec.at_size(); ++l) {
    const v1::BranchPoint& p = spec.at(l);
    if (l > 0 && p.turn() <= spec.at(l - 1).turn()) return bad("at: turns must be strictly increasing");
    if (p.count() == 1) return bad(absl::StrCat("at[", l, "].count must be at least 2 (or 0: the rest)"));
    if (p.count() == 0) {
      if (open >= 0) return bad("at: at most one point may leave its count 0");
      open = l;
    } else {
      product *= p.count();
      if (product > group_size) break;
    }
    plan.turns.push_back(p.turn());
    plan.counts.push_back(p.count());
  }
  if (open >= 0 && product <= group_size && group_size % product == 0 && group_size / product >= 2) {
    plan.counts[open] = static_cast<uint32_t>(group_size / product);
    product = group_size;
  }
  const bool unresolved = std::find(plan.counts.begin(), plan.counts.end(), 0u) != plan.counts.end();
  if (unresolved || product != group_size || plan.counts.size() != static_cast<size_t>(spec.at_size())) {
    std::string counts;
    for (const auto& p : spec.at())
      absl::StrAppend(&counts, counts.empty() ? "" : " x ", p.count() == 0 ? "?" : absl::StrCat(p.count()));
    return bad(absl::StrCat("at: the counts (", counts, ") must multiply to the batch's group_size (", group_size,
                            "): the group's episodes are the tree's leaves"));
  }
  return plan;
}

std::optional<BranchPlan> PlanOf(const v1::Task& task, uint32_t group_size) {
  if (!task.has_branch()) return std::nullopt;
  auto plan = PlanBranches(task.branch(), group_size);
  if (!plan.ok()) return std::nullopt;
  return *std::move(plan);
}

absl::Status CheckBranching(const v1::Task& task, uint32_t group_size, uint32_t redundancy) {
  if (!task.has_branch()) return absl::OkStatus();
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("task '", task.id(), "': ", what));
  };
  if (task.runner() != v1::RUNNER_TOOL_LOOP) return bad("branch is for the tool_loop runner");
  if (redundancy > 0) return bad("branch cannot be combined with spec.redundancy (the extras would have no tree)");
  auto plan = PlanBranches(task.branch(), std::max<uint32_t>(group_size, 1));
  if (!plan.ok()) return bad(std::string(plan.status().message()));
  return absl::OkStatus();
}

}  // namespace corral::scheduler
