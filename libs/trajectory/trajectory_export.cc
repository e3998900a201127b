// TrajectoryStore's exports (trajectory.h): the roles as the whole session settles them, the CALLS form (the
// store as recorded) and the TRAJECTORY form (each branch one conversation, with its generated mask and its flat
// token view).
#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "libs/trajectory/roles.h"
#include "libs/trajectory/trajectory.h"

namespace corral {

namespace {

// The policy version that generated completion token `completion_token` of `call` (its policy_version, moved
// by each version change at or before that token).
int64_t TokenVersion(const v1::LlmCall& call, int completion_token) {
  int64_t version = call.policy_version();
  for (const v1::PolicyVersionChange& change : call.version_changes()) {
    if (static_cast<int64_t>(change.completion_token()) <= completion_token) version = change.version();
  }
  return version;
}

// The calls whose answers a conversation holds, in order, as one flat token view on `ob`: the first prompt,
// then each completion and the next prompt's new tokens. Whether every prompt extended the one before (a prompt
// re-tokenized differently is spliced in whole, and the view is not consistent).
bool AppendTokenView(const std::vector<const v1::LlmCall*>& answered, v1::Branch* ob) {
  bool consistent = !answered.empty();
  std::vector<int32_t> context;  // previous prompt + completion
  for (const v1::LlmCall* answer : answered) {
    const v1::LlmCall& c = *answer;
    if (c.prompt_token_ids().empty() || (c.completion_token_ids().empty() && c.error().empty())) {
      consistent = false;
      continue;
    }
    const auto& prompt = c.prompt_token_ids();
    size_t from = 0;
    if (!context.empty()) {
      const bool extends = static_cast<size_t>(prompt.size()) >= context.size() &&
                           std::equal(context.begin(), context.end(), prompt.begin());
      if (extends) {
        from = context.size();
      } else {
        consistent = false;  // re-tokenized differently: splice the prompt in whole
      }
    }
    for (int i = static_cast<int>(from); i < prompt.size(); ++i) {
      ob->add_token_ids(prompt[i]);
      ob->add_token_generated(false);
      ob->add_token_logprobs(0);
      ob->add_token_versions(-1);
    }
    for (int i = 0; i < c.completion_token_ids_size(); ++i) {
      ob->add_token_ids(c.completion_token_ids(i));
      ob->add_token_generated(true);
      ob->add_token_logprobs(i < c.completion_logprobs_size() ? c.completion_logprobs(i) : 0);
      ob->add_token_versions(TokenVersion(c, i));
    }
    context.assign(prompt.begin(), prompt.end());
    context.insert(context.end(), c.completion_token_ids().begin(), c.completion_token_ids().end());
  }
  return consistent && ob->token_ids_size() > 0;
}

void CountRoles(const std::vector<RoleVerdict>& calls, v1::RoleCounts* counts) {
  for (const RoleVerdict& v : calls) {
    switch (v.role) {
      case v1::CALL_ROLE_AGENT: counts->set_agent(counts->agent() + 1); break;
      case v1::CALL_ROLE_AUXILIARY: counts->set_auxiliary(counts->auxiliary() + 1); break;
      case v1::CALL_ROLE_RETRY: counts->set_retry(counts->retry() + 1); break;
      case v1::CALL_ROLE_COMPACTION: counts->set_compaction(counts->compaction() + 1); break;
      case v1::CALL_ROLE_SUBAGENT: counts->set_subagent(counts->subagent() + 1); break;
      default: break;
    }
  }
}

template <class Message>
void SetRole(const RoleVerdict& v, Message* into) {
  into->set_role(v.role);
  into->set_role_reason(v.reason);
}

}  // namespace

TrajectoryStore::Settled TrajectoryStore::Settle() const {
  Settled s;
  for (const v1::LlmCall& c : calls_) s.calls.push_back({c.role(), c.role_reason()});
  for (const v1::Branch& b : branches_) s.branches.push_back({b.role(), b.role_reason()});
  // A lineage branch none of whose calls offers tools, beside lineage calls that do (e.g. a title call made
  // before the agent's first), is a side call's.
  std::vector<bool> offers(branches_.size(), false);
  bool any = false;
  for (const v1::LlmCall& c : calls_) {
    if (c.branch() < offers.size() && OffersTools(c) && IsLineage(c.role())) offers[c.branch()] = any = true;
  }
  for (size_t k = 0; k < calls_.size(); ++k) {
    const uint32_t b = calls_[k].branch();
    if (any && calls_[k].has_prompt_last_message() && !offers[b] && s.branches[b].role == v1::CALL_ROLE_AGENT) {
      s.calls[k] = s.branches[b] = {v1::CALL_ROLE_AUXILIARY, "no tools, while the agent's calls offer them"};
    }
  }
  absl::flat_hash_map<std::string_view, size_t>& index = s.by_id;
  for (size_t k = 0; k < calls_.size(); ++k) index[calls_[k].call_id()] = k;
  // The same prompt answered more than once: the answer the conversation went on from is kept (the first such,
  // else the latest answer); the others are retries. Only the conversation's own calls go on from an answer (a
  // side call appended to it does not).
  std::vector<bool> continued(nodes_.size(), false);
  for (const v1::MessageNode& n : nodes_) {
    auto creator = index.find(n.call_id());
    if (n.has_parent() && creator != index.end() && IsLineage(s.calls[creator->second].role)) {
      continued[n.parent()] = true;
    }
  }
  absl::flat_hash_map<uint32_t, std::vector<size_t>> by_prompt;
  for (size_t k = 0; k < calls_.size(); ++k) {
    const v1::LlmCall& c = calls_[k];
    if (c.has_prompt_last_message() && c.has_response_message() && IsLineage(s.calls[k].role)) {
      by_prompt[c.prompt_last_message()].push_back(k);
    }
  }
  for (const auto& [prompt, ks] : by_prompt) {
    if (ks.size() < 2) continue;
    size_t kept = ks.back();
    for (size_t k : ks) {
      if (continued[calls_[k].response_message()]) {
        kept = k;
        break;
      }
    }
    for (size_t k : ks) {
      if (k == kept) continue;
      s.calls[k] = {
          v1::CALL_ROLE_RETRY,
          absl::StrCat("the same prompt as ", calls_[kept].call_id(), ", whose answer ",
                       continued[calls_[kept].response_message()] ? "the conversation went on from" : "came later")};
    }
  }
  // A branch that ends in a retry is the retry's.
  for (size_t b = 0; b < branches_.size(); ++b) {
    const auto& ids = branches_[b].call_ids();
    if (ids.empty()) continue;
    if (auto it = index.find(*ids.rbegin()); it != index.end() && s.calls[it->second].role == v1::CALL_ROLE_RETRY) {
      s.branches[b] = s.calls[it->second];
    }
  }
  return s;
}

void TrajectoryStore::ExportTotals(v1::Trajectory* out) const {
  out->set_call_count(static_cast<uint32_t>(calls_.size()));
  uint32_t failed = 0;
  v1::Usage* usage = out->mutable_usage();
  for (const v1::LlmCall& c : calls_) {
    failed += c.error().empty() ? 0 : 1;
    if (c.error().empty()) {
      // The last token's version: a change after the last token produced none (without captured token ids there
      // is no telling, and the last change counts). Versions only move forward.
      const int n = c.completion_token_ids_size();
      const int64_t last = n > 0                         ? TokenVersion(c, n - 1)
                           : c.version_changes().empty() ? c.policy_version()
                                                         : c.version_changes().rbegin()->version();
      if (!out->has_first_policy_version() || c.policy_version() < out->first_policy_version()) {
        out->set_first_policy_version(c.policy_version());
      }
      if (!out->has_last_policy_version() || last > out->last_policy_version()) out->set_last_policy_version(last);
    }
    usage->set_prompt_tokens(usage->prompt_tokens() + c.usage().prompt_tokens());
    usage->set_completion_tokens(usage->completion_tokens() + c.usage().completion_tokens());
    usage->set_total_tokens(usage->total_tokens() + c.usage().total_tokens());
    usage->set_cached_prompt_tokens(usage->cached_prompt_tokens() + c.usage().cached_prompt_tokens());
  }
  out->set_failed_call_count(failed);
}

void TrajectoryStore::ExportConversation(const v1::Branch& b, const Settled& settled, v1::Branch* ob) const {
  ob->set_branch_id(b.branch_id());
  if (b.has_parent_branch()) ob->set_parent_branch(b.parent_branch());
  ob->set_shared_prefix_messages(b.shared_prefix_messages());
  *ob->mutable_call_ids() = b.call_ids();
  SetRole(settled.branches[b.branch_id()], ob);
  if (b.has_linked_branch()) ob->set_linked_branch(b.linked_branch());
  // The calls whose answers the conversation holds, in order: a fork's first answers came from its parent's
  // calls (a retry's sibling, an edited history), and its token view needs them.
  std::vector<const v1::LlmCall*> answered;
  for (uint32_t index : Chain(b.has_last_message() ? std::optional(b.last_message()) : std::nullopt)) {
    const v1::MessageNode& n = nodes_[index];
    v1::TrajectoryMessage* m = ob->add_messages();
    *m->mutable_message() = n.message();
    m->set_generated(n.generated());
    m->set_call_id(n.call_id());
    auto it = settled.by_id.find(n.call_id());
    if (!n.generated() || it == settled.by_id.end()) continue;
    const v1::LlmCall& producer = calls_[it->second];
    m->set_role(settled.calls[it->second].role);
    if (producer.response_message() == index) {
      *m->mutable_token_ids() = producer.completion_token_ids();
      *m->mutable_logprobs() = producer.completion_logprobs();
      answered.push_back(&producer);
    }
  }
  if (!b.call_ids().empty()) {  // a last call that failed has no answer, and still counts
    const v1::LlmCall* last = &calls_[settled.by_id.at(*b.call_ids().rbegin())];
    if (!last->has_response_message()) answered.push_back(last);
  }
  ob->set_tokens_consistent(AppendTokenView(answered, ob));
}

void TrajectoryStore::Export(v1::TrajectoryFormat format, v1::Trajectory* out) const {
  if (format == v1::TRAJECTORY_FORMAT_UNSPECIFIED) format = v1::TRAJECTORY_FORMAT_TRAJECTORY;
  out->set_env_id(env_id_);
  out->set_format(format);
  ExportTotals(out);
  const Settled settled = Settle();
  CountRoles(settled.calls, out->mutable_calls_by_role());
  if (format == v1::TRAJECTORY_FORMAT_CALLS) {
    for (const auto& n : nodes_) *out->add_messages() = n;
    for (size_t k = 0; k < calls_.size(); ++k) SetRole(settled.calls[k], &(*out->add_calls() = calls_[k]));
    for (size_t b = 0; b < branches_.size(); ++b) SetRole(settled.branches[b], &(*out->add_branches() = branches_[b]));
    return;
  }
  for (const v1::Branch& b : branches_) ExportConversation(b, settled, out->add_branches());
}

}  // namespace corral
