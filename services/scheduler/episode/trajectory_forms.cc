#include "services/scheduler/episode/trajectory_forms.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "libs/trajectory/trajectory.h"

namespace corral::scheduler {

namespace {

// Records the first `n` calls of `calls` (CALLS form) into `store`, their seq moved up by `seq_base`.
void Replay(const v1::Trajectory& calls, size_t n, uint32_t seq_base, TrajectoryStore& store) {
  for (int k = 0; k < calls.calls_size() && static_cast<size_t>(k) < n; ++k) {
    const v1::LlmCall& call = calls.calls(k);
    v1::RecordedCall recorded;
    *recorded.mutable_call() = call;
    recorded.mutable_call()->set_seq(call.seq() + seq_base);
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
}

// A trajectory with `meta`'s identity (env id, episode, open and close times), exported from `store`.
v1::Trajectory Exported(const v1::Trajectory& meta, const TrajectoryStore& store, v1::TrajectoryFormat format) {
  v1::Trajectory out;
  out.set_env_id(meta.env_id());
  if (meta.has_episode()) *out.mutable_episode() = meta.episode();
  out.set_complete(meta.complete());
  if (meta.has_opened_at()) *out.mutable_opened_at() = meta.opened_at();
  if (meta.has_closed_at()) *out.mutable_closed_at() = meta.closed_at();
  store.Export(format, &out);
  return out;
}

}  // namespace

v1::Trajectory ConvertTrajectory(const v1::Trajectory& calls, v1::TrajectoryFormat format) {
  if (format == v1::TRAJECTORY_FORMAT_CALLS || calls.format() != v1::TRAJECTORY_FORMAT_CALLS) return calls;
  TrajectoryStore store(calls.env_id());
  Replay(calls, SIZE_MAX, 0, store);
  return Exported(calls, store, v1::TRAJECTORY_FORMAT_TRAJECTORY);
}

v1::Trajectory JoinCalls(const v1::Trajectory& prefix, const v1::Trajectory& calls, size_t n) {
  TrajectoryStore store(calls.env_id());
  Replay(prefix, SIZE_MAX, 0, store);
  Replay(calls, n, static_cast<uint32_t>(store.calls()), store);
  return Exported(calls, store, v1::TRAJECTORY_FORMAT_CALLS);
}

}  // namespace corral::scheduler
