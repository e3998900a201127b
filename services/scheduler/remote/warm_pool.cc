#include "services/scheduler/remote/warm_pool.h"

#include "absl/strings/str_cat.h"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/this_coro.hpp"
#include "libs/api/proto_digest.h"
#include "libs/async/sleep.h"
#include "libs/async/spawn.h"
#include "libs/core/logging.h"
#include "spdlog/spdlog.h"

namespace corral::scheduler {

namespace asio = boost::asio;

WarmPool::WarmPool(HostRegistry* hosts, Clock* clock, int64_t size_per_spec, std::string scheduler_id,
                   std::function<int64_t()> room, absl::Duration idle_after)
    : hosts_(hosts),
      clock_(clock),
      size_(size_per_spec),
      scheduler_id_(std::move(scheduler_id)),
      room_(std::move(room)),
      idle_after_(idle_after) {}

std::string WarmPool::Key(const v1::SandboxSpec& spec) {
  v1::SandboxSpec s = spec;
  s.clear_labels();
  return DeterministicBytes(s);
}

int64_t WarmPool::ready() const {
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (const auto& [k, e] : entries_) n += static_cast<int64_t>(e.ready.size());
  return n;
}
int64_t WarmPool::hits() const {
  absl::MutexLock lock(&mu_);
  return hits_;
}
int64_t WarmPool::misses() const {
  absl::MutexLock lock(&mu_);
  return misses_;
}

asio::awaitable<std::optional<WarmSandbox>> WarmPool::Take(const v1::SandboxSpec& spec, const Requirements& needs) {
  // Sandboxes for a harness are made on hosts that have it: a pool of their own.
  const std::string key = needs.harness.empty() ? Key(spec) : absl::StrCat(Key(spec), "\nharness=", needs.harness);
  while (true) {
    std::optional<WarmSandbox> candidate;
    {
      absl::MutexLock lock(&mu_);
      Entry& e = entries_[key];
      if (e.wanted_at == absl::Time()) {
        e.spec = spec;
        e.spec.clear_labels();
        e.needs = needs;
      }
      e.wanted_at = clock_->Now();
      if (e.ready.empty()) {
        ++misses_;
        ++e.credits;
        co_return std::nullopt;
      }
      candidate = std::move(e.ready.front());
      e.ready.pop_front();
    }
    // Liveness: the host may have evicted it (idle) or restarted. And freshness: an image name may have moved
    // to another digest on that host since the sandbox was made (a re-import or a pull of a new tag).
    // (Its digest is known from its creation: a moved name costs no call to the host.)
    const std::string digest =
        spec.image().empty() ? "" : hosts_->ImageDigest(candidate->slot.client->address(), spec.image());
    if (digest.empty() || candidate->created.sandbox().image_digest() == digest) {
      auto got = co_await candidate->slot.client->Get(candidate->created.sandbox().sandbox_id(), absl::Seconds(2));
      if (got.ok() && got->state() == v1::SANDBOX_STATE_READY) {
        absl::MutexLock lock(&mu_);
        ++hits_;
        co_return candidate;
      }
    }
    co_await Discard(*std::move(candidate));
  }
}

asio::awaitable<void> WarmPool::Run(const std::atomic<bool>* stopping, absl::Duration interval) {
  while (!*stopping) {
    co_await Fill();
    co_await async::SleepFor(*clock_, interval);
  }
}

asio::awaitable<void> WarmPool::Fill() {
  std::vector<std::string> create;
  std::vector<WarmSandbox> expired;
  {
    absl::MutexLock lock(&mu_);
    int64_t room = room_();
    const absl::Time now = clock_->Now();
    for (auto& [key, e] : entries_) {
      if (now - e.wanted_at > idle_after_) {
        for (auto& w : e.ready) expired.push_back(std::move(w));
        e.ready.clear();
        continue;
      }
      // Inline misses since the last round already made sandboxes for that demand: one fewer each.
      int64_t want = size_ - static_cast<int64_t>(e.ready.size()) - e.creating - e.credits;
      e.credits = 0;
      for (; want > 0 && room > 0; --want, --room) {
        ++e.creating;
        create.push_back(key);
      }
    }
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (now - it->second.wanted_at > idle_after_ && it->second.creating == 0) {
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }
  auto executor = co_await asio::this_coro::executor;
  for (auto& w : expired) {
    async::Spawn(executor, Discard(std::move(w)), "discarding a warm sandbox");
  }
  for (auto& key : create) {
    async::Spawn(executor, CreateOne(std::move(key)), "a warm sandbox's creation");
  }
}

asio::awaitable<void> WarmPool::CreateOne(std::string key) {
  v1::SandboxSpec spec;
  Requirements needs;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) co_return;
    spec = it->second.spec;
    needs = it->second.needs;
  }
  (*spec.mutable_labels())[kSchedulerLabel] = scheduler_id_;
  // Not `= "1"`: in this coroutine frame GCC 12 reports a (false) stringop-overflow for a C string's assignment.
  (*spec.mutable_labels())["corral.warm"] = std::string(1, '1');
  std::optional<WarmSandbox> made;
  auto slot = hosts_->Reserve(needs, spec.template_key());
  if (slot.ok() && (spec.template_key().empty() || hosts_->HasTemplate(slot->client->address(), spec.template_key()))) {
    auto created =
        co_await slot->client->Create(spec, sandbox::CallOptions{nullptr, clock_->Now() + absl::Seconds(60)});
    if (created.ok()) {
      hosts_->Own(slot->client->address(), created->sandbox().sandbox_id());
      made = WarmSandbox{*slot, *std::move(created)};
    } else {
      if (created.status().code() == absl::StatusCode::kResourceExhausted)
        hosts_->MarkRejected(slot->client->address());
      hosts_->Release(slot->client->address());
    }
  } else if (slot.ok()) {
    hosts_->Release(slot->client->address());
  }
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it != entries_.end()) --it->second.creating;
  if (made) {
    if (it == entries_.end()) {
      // The spec stopped being wanted meanwhile.
      auto executor = co_await asio::this_coro::executor;
      async::Spawn(executor, Discard(*std::move(made)), "discarding a warm sandbox");
    } else {
      it->second.ready.push_back(*std::move(made));
    }
  }
}

asio::awaitable<void> WarmPool::Discard(WarmSandbox sandbox) {
  const std::string address = sandbox.slot.client->address();
  const std::string id = sandbox.created.sandbox().sandbox_id();
  (void)co_await sandbox.slot.client->Delete(id, absl::Seconds(30));
  hosts_->Disown(address, id);
  hosts_->Release(address);
}

asio::awaitable<void> WarmPool::Drain() {
  std::vector<WarmSandbox> all;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [k, e] : entries_) {
      for (auto& w : e.ready) all.push_back(std::move(w));
      e.ready.clear();
    }
  }
  for (auto& w : all) co_await Discard(std::move(w));
}

}  // namespace corral::scheduler
