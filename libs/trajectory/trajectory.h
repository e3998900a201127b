// A session's recorded calls, prefix-aggregated (common.proto, "Trajectories"): every distinct message is one
// node whose parent is the message before it and whose hash chains the parent's hash with the message's
// canonical JSON, so a call stores only the messages not already stored. A call whose prompt extends a branch's
// last message continues that branch; any other (a rewritten history) starts a new branch from the branch it
// shares the longest prefix with. Exports the CALLS form (the store) and the TRAJECTORY form (one linear
// conversation per branch with a generated mask and token views). Every call and branch gets a role (roles.h):
// a side call never continues the agent's branch, nor the agent's a side call's. Not thread-safe (the session
// locks it).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "corral/v1/common.pb.h"
#include "libs/trajectory/roles.h"

namespace corral {

// One call as recorded (common.proto): chat `prompt` and `response`; completions use call.prompt_text etc.
using RecordedCall = v1::RecordedCall;

class TrajectoryStore {
 public:
  // `rules`: the session's role rules (SessionPolicy.role_rules), tried before the built-in ones. A call that
  // already has a role (one replayed from a journal or an exported trajectory) keeps it when it is AUXILIARY, or
  // a COMPACTION that starts a conversation; other roles are found again.
  explicit TrajectoryStore(std::string env_id, RoleRules rules = {})
      : env_id_(std::move(env_id)), rules_(std::move(rules)) {}

  // Adds the call; returns it as stored (ids and node indices set). A call that already has a call_id (one
  // replayed from the journal) keeps its seq; new calls continue after the highest seq seen.
  const v1::LlmCall& Record(RecordedCall recorded);
  // The same, keeping `recorded` whole: its call is set to the call as stored, and the store keeps a copy of
  // that call (the proxy journals the whole record next, without copying its messages). `matched`: the nodes
  // Restore matched the prompt's first messages to, which are then not hashed again.
  void RecordKeeping(RecordedCall& recorded, std::span<const uint32_t> matched = {});
  // Marks a recorded call failed (e.g. it could not be journaled).
  void MarkFailed(uint32_t seq, const std::string& error, int http_status);

  // A new call's prompt as the model wrote it: an assistant message the agent sent back re-serialized
  // (resent.h) where the store holds the model's own at that point of the conversation becomes the model's, and
  // a tool result naming a renamed tool-call id gets the model's id. What was restored, by prompt index (empty:
  // the prompt stands as sent). A genuine edit of the history is left as it is (it starts a branch).
  // `matched`, when given, gets the stored node of each of the prompt's first messages that the store holds.
  std::vector<v1::RestoredMessage> Restore(std::vector<v1::ChatMessage>& prompt,
                                           std::vector<uint32_t>* matched = nullptr) const;

  // Fills the calls, messages and branches of `out` in `format` (TRAJECTORY when unspecified), and totals. Roles
  // that only later calls decide are settled here: a prompt sampled again is a RETRY unless the conversation went
  // on from its answer, and a branch without tools beside agent branches with tools is AUXILIARY.
  void Export(v1::TrajectoryFormat format, v1::Trajectory* out) const;

  size_t calls() const { return calls_.size(); }
  size_t nodes() const { return nodes_.size(); }
  size_t branches() const { return branches_.size(); }

  // Hex SHA-256 of (parent hash || 0 || canonical JSON of `message`: its non-empty fields in declaration
  // order, named as in the proto).
  static std::string ChainHash(const std::string& parent_hash, const v1::ChatMessage& message);

 private:
  // Sets the call's ids and node indices, adding its messages to the tree (Record's work but keeping the call).
  void Place(RecordedCall& recorded, std::span<const uint32_t> matched = {});
  // Appends `message` below `parent` (or finds the identical node there); returns its index.
  uint32_t Node(std::optional<uint32_t> parent, const v1::ChatMessage& message, bool generated,
                const std::string& call_id);
  std::vector<uint32_t> Chain(std::optional<uint32_t> last) const;  // root first
  // The role a call's request alone gives it: a preset role it keeps, a rule's, or AUXILIARY for a call without
  // tools while the agent's carry them.
  std::optional<RoleVerdict> Verdict(const RecordedCall& recorded) const;
  // The branch whose conversation the prompt continues (a side call only a side call's, any other call only a
  // lineage's), given its prompt's last node and how many of the prompt's nodes are new; nullopt: a new branch.
  std::optional<uint32_t> Continued(std::optional<uint32_t> prompt_last, size_t new_nodes, bool auxiliary) const;
  // Starts a branch for `recorded` with its role (from `verdict`, else what the session shows), forked from the
  // branch that stored the longest shared prefix; `opens`: the prompt's first message after the system prompt is
  // new (the call starts a conversation).
  uint32_t Open(RecordedCall& recorded, std::optional<uint32_t> prompt_last, size_t new_nodes,
                const std::optional<RoleVerdict>& verdict, bool opens);
  // The latest call whose answer `recorded`'s new conversation carries in a user or system message (or, with
  // `assistants`, as an assistant message too: a summary it continues from), and the
  // latest lineage call one of whose tool calls has an argument that is its first user message (a subagent's
  // task): the call's index in calls_, and what to record as the reason.
  std::optional<std::pair<size_t, std::string>> Summarized(const RecordedCall& recorded, bool assistants) const;
  std::optional<std::pair<size_t, std::string>> Started(const RecordedCall& recorded) const;
  // Roles as the whole session settles them (Export): per call and per branch, with reasons.
  struct Settled {
    std::vector<RoleVerdict> calls;
    std::vector<RoleVerdict> branches;
    absl::flat_hash_map<std::string_view, size_t> by_id;  // call id → index in calls_
  };
  Settled Settle() const;
  // Export's parts: the calls' totals (count, failures, usage, policy versions), and one branch as its
  // conversation (TRAJECTORY form) into `ob`.
  void ExportTotals(v1::Trajectory* out) const;
  void ExportConversation(const v1::Branch& b, const Settled& settled, v1::Branch* ob) const;
  void SetLast(uint32_t branch, uint32_t node);

  const std::string env_id_;
  const RoleRules rules_;
  bool lineage_tools_ = false;  // a lineage call offered tools
  std::vector<v1::MessageNode> nodes_;
  std::vector<uint32_t> depth_;                               // 1 for a root message
  std::vector<uint32_t> owner_;                               // the branch that first stored each node
  absl::flat_hash_map<uint32_t, uint32_t> branch_ending_at_;  // a branch's last message → that branch
  absl::flat_hash_map<std::string, uint32_t> by_hash_;
  // The nodes, and the generated nodes, below each node (-1: at the root), for Restore.
  absl::flat_hash_map<int64_t, std::vector<uint32_t>> children_;
  absl::flat_hash_map<int64_t, std::vector<uint32_t>> generated_below_;
  std::vector<v1::LlmCall> calls_;
  uint32_t next_seq_ = 0;
  std::vector<v1::Branch> branches_;  // structure only (ids, parent, shared prefix, call ids, last message)
};

}  // namespace corral
