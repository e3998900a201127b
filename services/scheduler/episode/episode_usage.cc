#include "services/scheduler/episode/episode_usage.h"

#include <algorithm>

#include "libs/api/proto_time.h"

namespace corral::scheduler {
namespace {

template <typename Usage>
void Add(const v1::LlmCall& call, Usage* out) {
  out->set_calls(out->calls() + 1);
  out->set_prompt_tokens(out->prompt_tokens() + call.usage().prompt_tokens());
  out->set_completion_tokens(out->completion_tokens() + call.usage().completion_tokens());
  out->set_cached_prompt_tokens(out->cached_prompt_tokens() + call.usage().cached_prompt_tokens());
}

}  // namespace

v1::ModelUsage ModelUsageOf(const v1::Trajectory& trajectory, int from, int to) {
  v1::ModelUsage out;
  std::map<int, v1::RoleUsage> roles;
  std::map<std::string, v1::NamedModelUsage> models;
  absl::Duration waited;
  to = std::min(to, trajectory.calls_size());
  for (int i = std::max(from, 0); i < to; ++i) {
    const v1::LlmCall& call = trajectory.calls(i);
    Add(call, &out);
    v1::RoleUsage& role = roles[call.role()];
    role.set_role(call.role());
    Add(call, &role);
    v1::NamedModelUsage& model = models[call.model()];
    model.set_model(call.model());
    Add(call, &model);
    if (call.timings().has_received() && call.timings().has_done()) {
      waited += std::max(FromProto(call.timings().done()) - FromProto(call.timings().received()), absl::ZeroDuration());
    }
  }
  ToProto(waited, out.mutable_wait_time());
  for (auto& [_, role] : roles) *out.add_by_role() = std::move(role);
  for (auto& [_, model] : models) *out.add_by_model() = std::move(model);
  return out;
}

v1::ToolUsage ToolUsageOf(const std::map<std::string, ToolTally>& by_name, absl::Duration total) {
  v1::ToolUsage out;
  ToProto(total, out.mutable_time());
  for (const auto& [name, tally] : by_name) {
    v1::NamedToolUsage* tool = out.add_by_tool();
    tool->set_name(name);
    tool->set_calls(tally.calls);
    ToProto(tally.time, tool->mutable_time());
    out.set_calls(out.calls() + tally.calls);
  }
  return out;
}

}  // namespace corral::scheduler
