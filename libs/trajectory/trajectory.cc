#include "libs/trajectory/trajectory.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
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

// The same identity as the canonical JSON (every field compared; an empty one is absent there too), without
// building it: how a prompt is matched against the messages stored below the one before it.
bool SameMessage(const v1::ChatMessage& a, const v1::ChatMessage& b) {
  if (a.role() != b.role() || a.content() != b.content() || a.content_parts_json() != b.content_parts_json() ||
      a.reasoning_content() != b.reasoning_content() || a.tool_call_id() != b.tool_call_id() || a.name() != b.name() ||
      a.tool_calls_size() != b.tool_calls_size()) {
    return false;
  }
  for (int i = 0; i < a.tool_calls_size(); ++i) {
    const v1::ToolCall& x = a.tool_calls(i);
    const v1::ToolCall& y = b.tool_calls(i);
    if (x.id() != y.id() || x.type() != y.type() || x.function_name() != y.function_name() ||
        x.arguments() != y.arguments()) {
      return false;
    }
  }
  return true;
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
  children_[below].push_back(node.index());
  nodes_.push_back(std::move(node));
  return nodes_.back().index();
}

std::vector<v1::RestoredMessage> TrajectoryStore::Restore(std::vector<v1::ChatMessage>& prompt,
                                                          std::vector<uint32_t>* matched) const {
  std::vector<v1::RestoredMessage> restored;
  if (matched != nullptr) matched->clear();
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
      std::optional<uint32_t> stored;  // the node below `at` that is this message (compared, not hashed)
      if (auto kids = children_.find(at ? static_cast<int64_t>(*at) : -1); kids != children_.end()) {
        for (uint32_t kid : kids->second) {
          if (SameMessage(nodes_[kid].message(), m)) {
            stored = kid;
            break;
          }
        }
      }
      if (stored) {
        at = stored;
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
    if (known && matched != nullptr) matched->push_back(*at);
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

std::optional<RoleVerdict> TrajectoryStore::Verdict(const RecordedCall& recorded) const {
  const v1::LlmCall& call = recorded.call();
  if (call.role() == v1::CALL_ROLE_AUXILIARY ||
      (call.role() == v1::CALL_ROLE_COMPACTION && !call.linked_call_id().empty())) {
    return RoleVerdict{call.role(), call.role_reason()};
  }
  if (auto ruled = MatchRoleRule(rules_, recorded)) return ruled;
  if (lineage_tools_ && !OffersTools(call) && call.role() != v1::CALL_ROLE_AGENT) {
    return RoleVerdict{v1::CALL_ROLE_AUXILIARY, "no tools, while the agent's calls offer them"};
  }
  return std::nullopt;
}

std::optional<uint32_t> TrajectoryStore::Continued(std::optional<uint32_t> prompt_last, size_t new_nodes,
                                                   bool auxiliary) const {
  // Walk up the prompt's chain (O(prompt length)): the first node that ends a branch of the call's kind means
  // the prompt continues that branch's conversation.
  size_t seen = 0;
  for (std::optional<uint32_t> n = prompt_last; n;
       n = nodes_[*n].has_parent() ? std::optional(nodes_[*n].parent()) : std::nullopt, ++seen) {
    if (seen < new_nodes) continue;
    auto it = branch_ending_at_.find(*n);
    if (it != branch_ending_at_.end() && (branches_[it->second].role() == v1::CALL_ROLE_AUXILIARY) == auxiliary) {
      return it->second;
    }
  }
  return std::nullopt;
}

// How far back a new conversation's summary or starting tool call is looked for: they come soon before it, and
// an agent that starts a new conversation on every call must not cost a scan of the whole session each time.
constexpr size_t kLinkWindow = 256;

std::optional<std::pair<size_t, std::string>> TrajectoryStore::Summarized(const RecordedCall& recorded,
                                                                          bool assistants) const {
  for (size_t k = calls_.size(); k-- > 0 && calls_.size() - k <= kLinkWindow;) {
    const v1::LlmCall& c = calls_[k];
    if (!c.has_response_message() || !c.error().empty()) continue;
    const std::string& answer = nodes_[c.response_message()].message().content();
    for (const v1::ChatMessage& m : recorded.prompt()) {
      if ((assistants || m.role() != "assistant") && m.role() != "tool" && CarriesAnswer(m.content(), answer)) {
        return std::pair(k, absl::StrCat("continues from the answer of ", c.call_id()));
      }
    }
  }
  return std::nullopt;
}

std::optional<std::pair<size_t, std::string>> TrajectoryStore::Started(const RecordedCall& recorded) const {
  const v1::ChatMessage* user = nullptr;
  for (const v1::ChatMessage& m : recorded.prompt()) {
    if (m.role() == "user") {
      user = &m;
      break;
    }
  }
  if (user == nullptr) return std::nullopt;
  for (size_t k = calls_.size(); k-- > 0 && calls_.size() - k <= kLinkWindow;) {
    const v1::LlmCall& c = calls_[k];
    if (!c.has_response_message() || !IsLineage(c.role())) continue;
    for (const v1::ToolCall& tc : nodes_[c.response_message()].message().tool_calls()) {
      for (const std::string& arg : StringArguments(tc.arguments())) {
        if (absl::StrContains(user->content(), arg)) {
          return std::pair(
              k, absl::StrCat("its first message is an argument of ", tc.function_name(), " in ", c.call_id()));
        }
      }
    }
  }
  return std::nullopt;
}

uint32_t TrajectoryStore::Open(RecordedCall& recorded, std::optional<uint32_t> prompt_last, size_t new_nodes,
                               const std::optional<RoleVerdict>& verdict, bool opens) {
  v1::LlmCall& call = *recorded.mutable_call();
  v1::Branch fork;
  fork.set_branch_id(static_cast<uint32_t>(branches_.size()));
  // The deepest prompt node stored before this call: the fork point.
  std::optional<uint32_t> first_old = prompt_last;
  for (size_t i = 0; i < new_nodes && first_old; ++i) {
    first_old = nodes_[*first_old].has_parent() ? std::optional(nodes_[*first_old].parent()) : std::nullopt;
  }
  if (first_old) {
    fork.set_parent_branch(owner_[*first_old]);
    fork.set_shared_prefix_messages(depth_[*first_old]);
  } else if (!branches_.empty()) {
    fork.set_parent_branch(0);
  }
  // Its role: the request's own, else a link the session shows, else its parent lineage's.
  auto link = [&](const std::pair<size_t, std::string>& found) {
    const v1::LlmCall& from = calls_[found.first];
    call.set_linked_call_id(from.call_id());
    const v1::Branch& b = branches_[from.branch()];
    fork.set_linked_branch(b.role() == v1::CALL_ROLE_AUXILIARY && b.has_parent_branch() ? b.parent_branch()
                                                                                        : b.branch_id());
    return found.second;
  };
  std::optional<std::pair<size_t, std::string>> found;
  if (verdict) {
    fork.set_role(verdict->role);
    fork.set_role_reason(verdict->reason);
    if (verdict->role == v1::CALL_ROLE_COMPACTION) {
      if (call.linked_call_id().empty()) {
        // The summary it carries, else the agent's latest call (a harness may rephrase the summary it resends).
        std::optional<std::pair<size_t, std::string>> summary = Summarized(recorded, /*assistants=*/true);
        for (size_t k = calls_.size(); !summary && k-- > 0;) {
          if (calls_[k].role() == v1::CALL_ROLE_AGENT) summary = std::pair(k, std::string());
        }
        if (summary) link(*summary);
      } else {
        for (size_t k = 0; k < calls_.size(); ++k) {
          if (calls_[k].call_id() == call.linked_call_id()) link({k, ""});
        }
      }
    }
  } else if (opens && (found = Summarized(recorded, /*assistants=*/false))) {
    fork.set_role(v1::CALL_ROLE_COMPACTION);
    fork.set_role_reason(link(*found));
  } else if (opens && (found = Started(recorded))) {
    fork.set_role(v1::CALL_ROLE_SUBAGENT);
    fork.set_role_reason(link(*found));
  } else if (fork.has_parent_branch() && fork.shared_prefix_messages() > 0 &&
             IsLineage(branches_[fork.parent_branch()].role())) {
    const v1::Branch& parent = branches_[fork.parent_branch()];
    fork.set_role(parent.role());
    fork.set_role_reason(absl::StrCat("a fork of branch ", parent.branch_id()));
    if (parent.has_linked_branch()) fork.set_linked_branch(parent.linked_branch());
  } else {
    fork.set_role(v1::CALL_ROLE_AGENT);
    fork.set_role_reason(branches_.empty() ? "the first conversation" : "a new conversation");
  }
  fork.add_call_ids(call.call_id());
  branches_.push_back(std::move(fork));
  return branches_.back().branch_id();
}

const v1::LlmCall& TrajectoryStore::Record(RecordedCall recorded) {
  Place(recorded);
  calls_.push_back(std::move(*recorded.mutable_call()));
  return calls_.back();
}

void TrajectoryStore::RecordKeeping(RecordedCall& recorded, std::span<const uint32_t> matched) {
  Place(recorded, matched);
  calls_.push_back(recorded.call());
}

void TrajectoryStore::Place(RecordedCall& recorded, std::span<const uint32_t> matched) {
  v1::LlmCall& call = *recorded.mutable_call();
  if (call.call_id().empty()) {
    call.set_seq(next_seq_);
    call.set_call_id(absl::StrCat(env_id_, "/", call.seq()));
  }
  next_seq_ = std::max(next_seq_, call.seq() + 1);
  const size_t before = nodes_.size();
  std::optional<uint32_t> last;
  bool opens = false;  // the first message after the system prompt is new
  bool past_system = false;
  for (int i = 0; i < recorded.prompt_size(); ++i) {
    const v1::ChatMessage& m = recorded.prompt(i);
    // A message Restore matched is that node (nodes never change), unless it is not below the one before.
    const size_t k = static_cast<size_t>(i);
    const bool below =
        k < matched.size() && matched[k] < nodes_.size() && nodes_[matched[k]].has_parent() == last.has_value() &&
        (!last || nodes_[matched[k]].parent() == *last) && nodes_[matched[k]].message().role() == m.role() &&
        nodes_[matched[k]].message().content().size() == m.content().size();
    last = below ? matched[k] : Node(last, m, /*generated=*/false, call.call_id());
    if (!past_system && m.role() != "system" && m.role() != "developer") {
      past_system = true;
      opens = *last >= before;
    }
  }
  if (last) call.set_prompt_last_message(*last);
  const bool chat = !recorded.prompt().empty() || recorded.has_response();
  if (!chat) {
    call.set_role(v1::CALL_ROLE_AGENT);
    call.set_role_reason("a text completion");
    return;
  }
  const size_t added = nodes_.size() - before;
  const std::optional<RoleVerdict> verdict = Verdict(recorded);
  const bool auxiliary = verdict && verdict->role == v1::CALL_ROLE_AUXILIARY;
  uint32_t branch = 0;
  if (std::optional<uint32_t> continued = Continued(last, added, auxiliary)) {
    branch = *continued;
    branches_[branch].add_call_ids(call.call_id());
    call.set_role(auxiliary ? verdict->role : branches_[branch].role());
    call.set_role_reason(auxiliary ? verdict->reason : branches_[branch].role_reason());
  } else {
    branch = Open(recorded, last, added, verdict, opens);
    call.set_role(branches_[branch].role());
    call.set_role_reason(branches_[branch].role_reason());
  }
  call.set_branch(branch);
  if (IsLineage(call.role()) && OffersTools(call)) lineage_tools_ = true;
  std::optional<uint32_t> end = last;
  if (recorded.has_response()) {
    end = Node(last, recorded.response(), /*generated=*/true, call.call_id());
    call.set_response_message(*end);
  }
  owner_.resize(nodes_.size(), branch);  // nodes this call added belong to its branch
  if (end) SetLast(branch, *end);
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

}  // namespace corral
