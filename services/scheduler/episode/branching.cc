#include "services/scheduler/episode/branching.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "libs/api/proto_time.h"
#include "services/scheduler/episode/trajectory_forms.h"

namespace corral::scheduler {

namespace asio = boost::asio;

namespace {

// How long a fork waits for the parent's stopped processes to go.
constexpr absl::Duration kForkWait = absl::Seconds(10);

Failure NoFork(const std::string& why) {
  return Failure{v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_INFRA, v1::EPISODE_PHASE_ACQUIRE,
                 absl::StrCat("branch: ", why)};
}

// The children of one split, started with their forks (or with why they have none).
asio::awaitable<void> Split(Attempt& a, size_t level, const boost::json::array& before_reply, int64_t turn) {
  const BranchPlan& plan = *a.ticket.branch_plan;
  std::vector<EpisodeTicket> children = a.branching.children->Branch(a.ticket, level);
  if (children.empty()) co_return;  // ended already (cancelled, the batch's deadline)
  // Fork-ready processes (the persistent tools' sessions, stdio MCP servers) are carried into every child; the
  // rest start again on their next call, here and there.
  std::map<std::string, ResidentProcesses::Entry> carried = a.residents.StopAllButForkReady();

  std::optional<Failure> failure;
  v1::CreateSandboxesResponse forked;
  {
    v1::ForkSandboxRequest request;
    request.set_sandbox_id(a.sandbox_id);
    request.set_count(static_cast<uint32_t>(children.size()));
    (*request.mutable_labels())["corral.branch_of"] = a.ticket.ids.episode_id();
    ToProto(kForkWait, request.mutable_wait_timeout());
    const absl::Time deadline = std::min(a.clock->Now() + kForkWait + absl::Seconds(30), a.EpisodeDeadline());
    auto out = co_await a.slot->client->Fork(request, sandbox::CallOptions{nullptr, deadline});
    if (!out.ok() && out.status().code() == absl::StatusCode::kFailedPrecondition && !carried.empty()) {
      // A process that cannot be carried (a job a bash session left running, a server with threads): without
      // them, they start afresh in every branch, as in the parent.
      spdlog::warn("episode {}: its sessions start afresh after this split: {}", a.ticket.ids.episode_id(),
                   std::string(out.status().message()));
      a.residents.StopAll();
      carried.clear();
      out = co_await a.slot->client->Fork(std::move(request), sandbox::CallOptions{nullptr, deadline});
    }
    if (out.ok()) {
      forked = *std::move(out);
    } else {
      failure = NoFork(absl::StrCat("forking sandbox ", a.sandbox_id, " on ", a.slot->client->address(), ": ",
                                    out.status().message()));
    }
  }
  // The shared prefix: the ancestors' calls, then this session's but the reply being branched from.
  v1::Trajectory prefix;
  if (!failure) {
    auto own = co_await a.proxy->Trajectory(a.ticket.env_id, v1::TRAJECTORY_FORMAT_CALLS, absl::Seconds(30));
    if (own.ok()) {
      const v1::Trajectory empty;
      const size_t keep = own->calls_size() > 0 ? static_cast<size_t>(own->calls_size() - 1) : 0;
      prefix = JoinCalls(a.branching.resume ? a.branching.resume->prefix : empty, *own, keep);
    } else {
      failure = NoFork(
          absl::StrCat("taking the shared prefix from proxy ", a.proxy->address(), ": ", own.status().message()));
    }
  }
  for (size_t k = 0; k < children.size(); ++k) {
    auto start = std::make_shared<BranchStart>();
    const uint32_t index = children[k].ids.index_in_group();
    start->messages = before_reply;
    start->turn = turn;
    start->info = BranchInfoOf(plan, a.ticket.ids.batch_id(), a.ticket.ids.group_index(), index);
    *start->info.mutable_turns() = a.branching.info.turns();
    start->info.set_turn(static_cast<uint32_t>(turn));
    start->info.set_prefix_calls(static_cast<uint32_t>(prefix.calls_size()));
    start->prefix = prefix;
    start->llm_calls = a.result.llm_calls() > 0 ? a.result.llm_calls() - 1 : 0;  // the branched reply is not theirs
    start->tool_calls = a.result.tool_calls();
    start->episode_deadline = a.episode_deadline;
    start->agent_start = a.agent_start;
    start->workdir = a.workdir;
    if (failure) {
      start->failure = failure;
    } else if (static_cast<int>(k) >= forked.sandboxes_size()) {
      start->failure = NoFork(absl::StrCat("host ", a.slot->client->address(), " had no room for this branch (",
                                           forked.rejected_reason(), ")"));
    } else {
      start->slot = a.slot;
      const v1::CreatedSandbox& child = forked.sandboxes(static_cast<int>(k));
      start->sandbox = child.sandbox();
      for (const auto& [key, entry] : carried) {
        for (const v1::Process& copy : child.carried_processes()) {
          if (!copy.copy_of().empty() && copy.copy_of() == entry.process->process_id()) {
            start->carried.push_back({key, copy.process_id(), entry.marker});
          }
        }
      }
    }
    a.branching.children->StartChild(std::move(children[k]), std::move(start));
  }
}

}  // namespace

asio::awaitable<void> SplitIfDue(Attempt& a, const boost::json::array& before_reply, int64_t turn, bool last) {
  if (!a.ticket.branch_plan || a.branching.children == nullptr) co_return;
  const BranchPlan& plan = *a.ticket.branch_plan;
  while (a.branching.next_level < plan.levels()) {
    const size_t level = a.branching.next_level;
    if (turn < static_cast<int64_t>(plan.turns[level]) && !last) co_return;
    ++a.branching.next_level;
    a.branching.info.add_turns(static_cast<uint32_t>(turn));
    co_await Split(a, level, before_reply, turn);
  }
}

void SetBranchInfo(const Attempt& a, v1::EpisodeResult& result) {
  if (!a.ticket.branch_plan) return;
  *result.mutable_branch() = a.branching.info;
}

}  // namespace corral::scheduler
