#include "libs/trajectory/trajectory.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "boost/json.hpp"
#include "libs/trajectory/resent.h"
#include "openssl/sha.h"

namespace corral {

namespace {

// A JSON string as boost::json spells it (the hashes depend on the exact bytes).
void AppendJsonString(std::string& out, const std::string& value) {
  boost::json::serializer sr;
  sr.reset(boost::json::string_view(value.data(), value.size()));
  char buf[1024];
  while (!sr.done()) {
    const boost::json::string_view part = sr.read(buf, sizeof buf);
    out.append(part.data(), part.size());
  }
}

// Appends the message's canonical JSON: fields in declaration order, empty ones left out (a tool call's are all
// kept) — one spelling per message. Written directly: building a boost::json::object first was most of the cost.
void AppendCanonicalJson(std::string& out, const v1::ChatMessage& m) {
  bool first = true;
  auto key = [&out, &first](const char* name) {
    out.append(first ? "{\"" : ",\"");
    first = false;
    out.append(name);
    out.append("\":");
  };
  auto put = [&](const char* name, const std::string& value) {
    if (value.empty()) return;
    key(name);
    AppendJsonString(out, value);
  };
  put("role", m.role());
  put("content", m.content());
  put("content_parts_json", m.content_parts_json());
  put("reasoning_content", m.reasoning_content());
  if (m.tool_calls_size() > 0) {
    key("tool_calls");
    out.push_back('[');
    for (int i = 0; i < m.tool_calls_size(); ++i) {
      const v1::ToolCall& tc = m.tool_calls(i);
      out.append(i == 0 ? "{\"id\":" : ",{\"id\":");
      AppendJsonString(out, tc.id());
      out.append(",\"type\":");
      AppendJsonString(out, tc.type());
      out.append(",\"function_name\":");
      AppendJsonString(out, tc.function_name());
      out.append(",\"arguments\":");
      AppendJsonString(out, tc.arguments());
      out.push_back('}');
    }
    out.push_back(']');
  }
  put("tool_call_id", m.tool_call_id());
  put("name", m.name());
  out.append(first ? "{}" : "}");
}

}  // namespace

std::string TrajectoryStore::ChainHash(const std::string& parent_hash, const v1::ChatMessage& message) {
  std::string input;
  input.reserve(parent_hash.size() + 64 + message.content().size());
  input.append(parent_hash);
  input.push_back('\0');
  AppendCanonicalJson(input, message);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(input.data()), input.size(), digest);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), sizeof digest));
}

uint32_t TrajectoryStore::Node(std::optional<uint32_t> parent, const v1::ChatMessage& message, bool generated,
                               const std::string& call_id) {
  const std::string hash = ChainHash(parent ? nodes_[*parent].hash() : "", message);
  const int64_t below = parent ? static_cast<int64_t>(*parent) : -1;
  if (auto it = by_hash_.find(hash); it != by_hash_.end()) {
    if (generated && !nodes_[it->second].generated()) {
      nodes_[it->second].set_generated(true);
      generated_below_[below].push_back(it->second);
    }
    return it->second;
  }
  v1::MessageNode node;
  node.set_index(static_cast<uint32_t>(nodes_.size()));
  if (parent) node.set_parent(*parent);
  node.set_hash(hash);
  *node.mutable_message() = message;
  node.set_generated(generated);
  node.set_call_id(call_id);
  depth_.push_back(parent ? depth_[*parent] + 1 : 1);
  by_hash_.emplace(hash, node.index());
  if (generated) generated_below_[below].push_back(node.index());
  nodes_.push_back(std::move(node));
  return nodes_.back().index();
}

std::vector<v1::RestoredMessage> TrajectoryStore::Restore(std::vector<v1::ChatMessage>& prompt) const {
  std::vector<v1::RestoredMessage> restored;
  std::optional<uint32_t> at;  // the stored node the prompt has matched so far; nullopt at the root
  bool known = true;           // every message so far is stored (else the rest is new history)
  absl::flat_hash_map<std::string, std::string> ids;  // tool-call ids the agent renamed → the model's
  for (size_t i = 0; i < prompt.size(); ++i) {
    v1::ChatMessage& m = prompt[i];
    std::vector<std::string> changes;
    if (auto it = ids.find(m.tool_call_id()); it != ids.end() && !m.tool_call_id().empty()) {
      m.set_tool_call_id(it->second);
      changes.push_back("tool_call_id");
    }
    if (known) {
      const std::string hash = ChainHash(at ? nodes_[*at].hash() : "", m);
      if (auto it = by_hash_.find(hash); it != by_hash_.end()) {
        at = it->second;
      } else {
        known = false;
        auto below = generated_below_.find(at ? static_cast<int64_t>(*at) : -1);
        if (m.role() == "assistant" && below != generated_below_.end()) {
          for (uint32_t candidate : below->second) {
            if (IsResent(nodes_[candidate].message(), m, &changes, &ids)) {
              m = nodes_[candidate].message();
              at = candidate;
              known = true;
              break;
            }
          }
        }
      }
    }
    if (!changes.empty()) {
      v1::RestoredMessage& r = restored.emplace_back();
      r.set_index(static_cast<uint32_t>(i));
      for (std::string& c : changes) r.add_changes(std::move(c));
    }
  }
  return restored;
}

std::vector<uint32_t> TrajectoryStore::Chain(std::optional<uint32_t> last) const {
  std::vector<uint32_t> chain;
  for (std::optional<uint32_t> n = last; n;
       n = nodes_[*n].has_parent() ? std::optional(nodes_[*n].parent()) : std::nullopt) {
    chain.push_back(*n);
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

void TrajectoryStore::SetLast(uint32_t branch, uint32_t node) {
  v1::Branch& b = branches_[branch];
  if (b.has_last_message()) branch_ending_at_.erase(b.last_message());
  b.set_last_message(node);
  branch_ending_at_[node] = branch;
}

uint32_t TrajectoryStore::Assign(std::optional<uint32_t> prompt_last, size_t new_nodes, const std::string& call_id) {
  // Walk up the prompt's chain (O(prompt length)): the first node that ends a branch means the prompt
  // continues that branch's conversation…
  std::optional<uint32_t> first_old;  // the deepest prompt node stored before this call
  size_t seen = 0;
  for (std::optional<uint32_t> n = prompt_last; n;
       n = nodes_[*n].has_parent() ? std::optional(nodes_[*n].parent()) : std::nullopt, ++seen) {
    if (seen < new_nodes) continue;
    if (!first_old) first_old = *n;
    if (auto it = branch_ending_at_.find(*n); it != branch_ending_at_.end()) {
      branches_[it->second].add_call_ids(call_id);
      return it->second;
    }
  }
  // …otherwise it starts a branch, forked from the one that stored the longest shared prefix.
  v1::Branch fork;
  fork.set_branch_id(static_cast<uint32_t>(branches_.size()));
  if (first_old) {
    fork.set_parent_branch(owner_[*first_old]);
    fork.set_shared_prefix_messages(depth_[*first_old]);
  } else if (!branches_.empty()) {
    fork.set_parent_branch(0);
  }
  fork.add_call_ids(call_id);
  branches_.push_back(std::move(fork));
  return branches_.back().branch_id();
}

const v1::LlmCall& TrajectoryStore::Record(RecordedCall recorded) {
  Place(recorded);
  calls_.push_back(std::move(*recorded.mutable_call()));
  return calls_.back();
}

void TrajectoryStore::RecordKeeping(RecordedCall& recorded) {
  Place(recorded);
  calls_.push_back(recorded.call());
}

void TrajectoryStore::Place(RecordedCall& recorded) {
  v1::LlmCall& call = *recorded.mutable_call();
  if (call.call_id().empty()) {
    call.set_seq(next_seq_);
    call.set_call_id(absl::StrCat(env_id_, "/", call.seq()));
  }
  next_seq_ = std::max(next_seq_, call.seq() + 1);
  const size_t before = nodes_.size();
  std::optional<uint32_t> last;
  for (const v1::ChatMessage& m : recorded.prompt()) last = Node(last, m, /*generated=*/false, call.call_id());
  if (last) call.set_prompt_last_message(*last);
  const bool chat = !recorded.prompt().empty() || recorded.has_response();
  if (chat) {
    const uint32_t branch = Assign(last, nodes_.size() - before, call.call_id());
    call.set_branch(branch);
    std::optional<uint32_t> end = last;
    if (recorded.has_response()) {
      end = Node(last, recorded.response(), /*generated=*/true, call.call_id());
      call.set_response_message(*end);
    }
    owner_.resize(nodes_.size(), branch);  // nodes this call added belong to its branch
    if (end) SetLast(branch, *end);
  }
}

void TrajectoryStore::MarkFailed(uint32_t seq, const std::string& error, int http_status) {
  for (auto it = calls_.rbegin(); it != calls_.rend(); ++it) {
    if (it->seq() == seq) {
      it->set_error(error);
      it->set_http_status(http_status);
      return;
    }
  }
}

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

}  // namespace

void TrajectoryStore::Export(v1::TrajectoryFormat format, v1::Trajectory* out) const {
  if (format == v1::TRAJECTORY_FORMAT_UNSPECIFIED) format = v1::TRAJECTORY_FORMAT_TRAJECTORY;
  out->set_env_id(env_id_);
  out->set_format(format);
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
  if (format == v1::TRAJECTORY_FORMAT_CALLS) {
    for (const auto& n : nodes_) *out->add_messages() = n;
    for (const auto& c : calls_) *out->add_calls() = c;
    for (const auto& b : branches_) *out->add_branches() = b;
    return;
  }
  // TRAJECTORY form: each branch as one conversation, with the generated mask and token views.
  absl::flat_hash_map<std::string, const v1::LlmCall*> call_by_id;
  for (const auto& c : calls_) call_by_id[c.call_id()] = &c;
  for (const v1::Branch& b : branches_) {
    v1::Branch* ob = out->add_branches();
    ob->set_branch_id(b.branch_id());
    if (b.has_parent_branch()) ob->set_parent_branch(b.parent_branch());
    ob->set_shared_prefix_messages(b.shared_prefix_messages());
    *ob->mutable_call_ids() = b.call_ids();
    for (uint32_t index : Chain(b.has_last_message() ? std::optional(b.last_message()) : std::nullopt)) {
      const v1::MessageNode& n = nodes_[index];
      v1::TrajectoryMessage* m = ob->add_messages();
      *m->mutable_message() = n.message();
      m->set_generated(n.generated());
      m->set_call_id(n.call_id());
      auto it = call_by_id.find(n.call_id());
      if (n.generated() && it != call_by_id.end() && it->second->response_message() == index) {
        *m->mutable_token_ids() = it->second->completion_token_ids();
        *m->mutable_logprobs() = it->second->completion_logprobs();
      }
    }
    // Flat token view: first prompt, then each completion and the next prompt's new tokens.
    bool consistent = b.call_ids_size() > 0;
    std::vector<int32_t> context;  // previous prompt + completion
    for (const std::string& id : b.call_ids()) {
      const v1::LlmCall& c = *call_by_id.at(id);
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
    ob->set_tokens_consistent(consistent && ob->token_ids_size() > 0);
  }
}

}  // namespace corral
