#include "services/scheduler/trajectory_forms.h"

#include "libs/trajectory/trajectory.h"

namespace corral::scheduler {

v1::Trajectory ConvertTrajectory(const v1::Trajectory& calls, v1::TrajectoryFormat format) {
  if (format == v1::TRAJECTORY_FORMAT_CALLS || calls.format() != v1::TRAJECTORY_FORMAT_CALLS) return calls;
  TrajectoryStore store(calls.env_id());
  for (const v1::LlmCall& call : calls.calls()) {
    v1::RecordedCall recorded;
    *recorded.mutable_call() = call;
    if (call.has_prompt_last_message()) {
      // The prompt is the chain of nodes ending at its last message.
      std::vector<v1::ChatMessage> chain;
      std::optional<uint32_t> at = call.prompt_last_message();
      while (at && *at < static_cast<uint32_t>(calls.messages_size())) {
        const v1::MessageNode& node = calls.messages(static_cast<int>(*at));
        chain.push_back(node.message());
        at = node.has_parent() ? std::optional<uint32_t>(node.parent()) : std::nullopt;
      }
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) *recorded.add_prompt() = std::move(*it);
    }
    if (call.has_response_message() && call.response_message() < static_cast<uint32_t>(calls.messages_size())) {
      *recorded.mutable_response() = calls.messages(static_cast<int>(call.response_message())).message();
    }
    recorded.mutable_call()->clear_prompt_last_message();
    recorded.mutable_call()->clear_response_message();
    store.Record(std::move(recorded));
  }
  v1::Trajectory out;
  out.set_env_id(calls.env_id());
  if (calls.has_episode()) *out.mutable_episode() = calls.episode();
  out.set_complete(calls.complete());
  if (calls.has_opened_at()) *out.mutable_opened_at() = calls.opened_at();
  if (calls.has_closed_at()) *out.mutable_closed_at() = calls.closed_at();
  store.Export(v1::TRAJECTORY_FORMAT_TRAJECTORY, &out);
  return out;
}

}  // namespace corral::scheduler
