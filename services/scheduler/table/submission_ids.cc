// Submission, continued: what names and derives a batch's parts — its digest, episode seeds, the ids of groups,
// episodes and environments (and parsing them back), template keys, runner names and what a task needs.
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "libs/api/proto_digest.h"
#include "services/scheduler/table/submission.h"

namespace corral::scheduler {
namespace {

// SplitMix64's finalizer: a well-spread 64-bit hash of `z`.
uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

std::string BatchDigest(const v1::BatchSpec& submitted, const std::vector<v1::Task>& tasks) {
  // Length-prefixed messages, so no two different batches serialize to the same bytes.
  std::string bytes;
  auto add = [&](const std::string& m) {
    absl::StrAppend(&bytes, m.size(), ":");
    bytes += m;
  };
  add(DeterministicBytes(submitted));
  for (const auto& t : tasks) add(DeterministicBytes(t));
  return Sha256Hex(bytes);
}

uint64_t EpisodeSeed(uint64_t batch_seed, uint32_t group_index, uint32_t index_in_group) {
  return Mix(Mix(batch_seed) ^ ((static_cast<uint64_t>(group_index) << 32) | index_in_group));
}

std::string GroupId(const std::string& batch_id, uint32_t group_index) {
  return absl::StrCat(batch_id, ":g", group_index);
}

std::string EnvId(const std::string& episode_id, uint32_t run) { return absl::StrCat(episode_id, ":r", run); }

std::string EpisodeId(const std::string& batch_id, uint32_t group_index, uint32_t index_in_group) {
  return absl::StrCat(batch_id, ":g", group_index, ":e", index_in_group);
}

namespace {
// Splits off the last ":<prefix><number>" of `id`.
bool SplitSuffix(absl::string_view& id, char prefix, uint32_t* n) {
  const size_t colon = id.rfind(':');
  if (colon == absl::string_view::npos || colon + 2 > id.size() || id[colon + 1] != prefix) return false;
  // Canonical decimal only ("e1", never "e01", "e+1" or "e 1"): one episode has one id.
  const absl::string_view digits = id.substr(colon + 2);
  if (digits.size() > 9 || (digits.size() > 1 && digits[0] == '0')) return false;
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  if (!absl::SimpleAtoi(digits, n)) return false;
  id = id.substr(0, colon);
  return !id.empty();
}
}  // namespace

absl::StatusOr<EpisodeRef> ParseEpisodeId(const std::string& id, const char* field) {
  absl::string_view rest = id;
  EpisodeRef ref;
  if (!SplitSuffix(rest, 'e', &ref.index_in_group) || !SplitSuffix(rest, 'g', &ref.group_index)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " '", id, "' is not an episode id (<batch_id>:g<N>:e<M>)"));
  }
  ref.batch_id = std::string(rest);
  return ref;
}

absl::StatusOr<EpisodeRef> ParseGroupId(const std::string& id, const char* field) {
  absl::string_view rest = id;
  EpisodeRef ref;
  if (!SplitSuffix(rest, 'g', &ref.group_index)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " '", id, "' is not a group id (<batch_id>:g<N>)"));
  }
  ref.batch_id = std::string(rest);
  return ref;
}

std::string TemplateKey(const v1::EnvironmentSpec& environment) {
  if (environment.setup_files().empty() && environment.setup_commands().empty()) return "";
  v1::EnvironmentSpec setup;
  *setup.mutable_setup_files() = environment.setup_files();
  *setup.mutable_setup_commands() = environment.setup_commands();
  setup.set_setup_network_policy(environment.setup_network_policy());
  setup.set_image(environment.image());  // a template on an image is a layer over that image
  return absl::StrCat("sha256-", Sha256Hex(DeterministicBytes(setup), 20));
}

const char* RunnerName(v1::Runner runner) {
  switch (runner) {
    case v1::RUNNER_SINGLE_TURN: return "single_turn";
    case v1::RUNNER_TOOL_LOOP: return "tool_loop";
    case v1::RUNNER_AGENT: return "agent";
    case v1::RUNNER_ENVIRONMENT: return "environment";
    default: return "unspecified";
  }
}

v1::Runner ParseRunner(const std::string& name) {
  if (name == "single_turn") return v1::RUNNER_SINGLE_TURN;
  if (name == "tool_loop") return v1::RUNNER_TOOL_LOOP;
  if (name == "agent") return v1::RUNNER_AGENT;
  if (name == "environment") return v1::RUNNER_ENVIRONMENT;
  return v1::RUNNER_UNSPECIFIED;
}

v1::NetworkPolicy NetworkOf(const v1::Task& task) {
  const v1::NetworkPolicy set = task.environment().network_policy();
  if (set != v1::NETWORK_POLICY_UNSPECIFIED) return set;
  return task.runner() == v1::RUNNER_AGENT ? v1::NETWORK_POLICY_PROXY_ONLY : v1::NETWORK_POLICY_NONE;
}

bool NeedsSandbox(const v1::Task& task) {
  return task.runner() != v1::RUNNER_SINGLE_TURN || task.reward().function() == v1::REWARD_FUNCTION_VERIFIER;
}

}  // namespace corral::scheduler
