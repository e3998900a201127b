// How an attempt ends for its sandboxes and its usage: EpisodeDriver::EndSandboxes, Cleanup and MeasureUsage.
// Coroutines here compute every co_await argument into a local first (GCC 12, see runners.cc).
#include <algorithm>
#include <array>
#include <utility>

#include "boost/asio/experimental/awaitable_operators.hpp"
#include "boost/asio/this_coro.hpp"
#include "libs/api/proto_time.h"
#include "libs/async/spawn.h"
#include "libs/core/logging.h"
#include "services/scheduler/episode/episode_driver.h"
#include "services/scheduler/episode/episode_usage.h"
#include "services/scheduler/table/usage_totals.h"
#include "spdlog/spdlog.h"

namespace corral::scheduler {
namespace {

namespace asio = boost::asio;

// DeleteSandbox of `sandbox_id` on `host` (its files walked first with `disk`); NOT_FOUND at once for none.
asio::awaitable<absl::StatusOr<v1::DeleteSandboxResponse>> DeleteOn(std::shared_ptr<sandbox::HostApi> host,
                                                                    std::string sandbox_id, bool disk) {
  if (sandbox_id.empty()) co_return absl::NotFoundError("no sandbox");
  v1::DeleteSandboxRequest request;
  request.set_sandbox_id(std::move(sandbox_id));
  request.set_disk_usage(disk);
  co_return co_await host->DeleteSandbox(std::move(request), absl::Seconds(10));
}

}  // namespace

asio::awaitable<void> EpisodeDriver::EndSandboxes(Attempt& a) {
  if (!a.slot) co_return;
  const Slot slot = *std::exchange(a.slot, std::nullopt);
  std::string agents = a.sandbox_id, verifiers = std::exchange(a.verifier_sandbox_id, "");
  bool release = true;
  if (options_.measure_usage) {
    // The usage at the end comes with the delete: one call where a reading and a delete would be two. A host that
    // does not answer within the deletes' 10 s leaves the rest to the background.
    auto agent_delete = DeleteOn(slot.client, agents, /*disk=*/true);
    auto verifier_delete = DeleteOn(slot.client, verifiers, /*disk=*/false);
    using namespace asio::experimental::awaitable_operators;
    auto both = co_await (std::move(agent_delete) && std::move(verifier_delete));
    auto& [agent, verifier] = both;
    v1::EpisodeUsage& usage = *a.result.mutable_usage();
    if (agent.ok()) {
      Released(slot, agents);
      agents.clear();
      release = false;
      *usage.mutable_sandbox() = agent->usage();
      if (a.cpu_before_verifier && agent->usage().has_cpu_time()) {
        const absl::Duration used = FromProto(agent->usage().cpu_time()) - *a.cpu_before_verifier;
        ToProto(std::max(used, absl::ZeroDuration()), usage.mutable_verifier()->mutable_cpu_time());
      }
    } else if (!agents.empty()) {
      spdlog::debug("episode {}: deleting its sandbox with its usage: {}", a.ticket.ids.episode_id(), agent.status());
    }
    if (verifier.ok()) {
      verifiers.clear();
      // What the verifier's own sandbox used, and nothing else did.
      if (verifier->usage().has_cpu_time())
        *usage.mutable_verifier()->mutable_cpu_time() = verifier->usage().cpu_time();
    }
  }
  if (release || !verifiers.empty()) {
    auto executor = co_await asio::this_coro::executor;
    async::Spawn(executor, Cleanup(slot, std::move(agents), std::move(verifiers), release), "a sandbox's cleanup");
  }
}

asio::awaitable<void> EpisodeDriver::Cleanup(Slot slot, std::string sandbox_id, std::string verifier_sandbox_id,
                                             bool release) {
  const std::array<const std::string*, 2> ids = {&sandbox_id, &verifier_sandbox_id};
  for (const std::string* id : ids) {
    if (id->empty()) continue;
    absl::Status s = co_await slot.client->Delete(*id, absl::Seconds(60));
    if (!s.ok() && s.code() != absl::StatusCode::kNotFound) {
      spdlog::warn("host {}: deleting sandbox {}: {} (the next sweep of the host removes it)", slot.client->address(),
                   *id, s);
    }
  }
  if (release) Released(slot, sandbox_id);
}

void EpisodeDriver::Released(const Slot& slot, const std::string& sandbox_id) {
  hosts_->Disown(slot.client->address(), sandbox_id);
  hosts_->Release(slot.client->address());
}

void EpisodeDriver::MeasureUsage(Attempt& a) {
  v1::EpisodeResult& r = a.result;
  v1::EpisodeUsage& usage = *r.mutable_usage();
  if (r.has_trajectory()) {
    // One count for every runner: the calls the proxy recorded (a branch's include its ancestors' prefix).
    const int calls = r.trajectory().calls_size();
    const int prefix = static_cast<int>(r.branch().prefix_calls());
    r.set_llm_calls(static_cast<uint32_t>(calls));
    *usage.mutable_model() = ModelUsageOf(r.trajectory(), prefix, calls);
    if (prefix > 0) *usage.mutable_shared_model() = ModelUsageOf(r.trajectory(), 0, prefix);
  }
  *usage.mutable_tools() = ToolUsageOf(a.tools_by_name, a.tools_time);
  if (std::optional<double> cost = CostOf(usage, options_.prices)) usage.set_cost(*cost);
}

}  // namespace corral::scheduler
