// The SandboxManager tests' fixture: a manager and an ExecManager for real (root), on a root directory and a uid
// range of the test process's own, and helpers that run a command to its exit.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "services/sandbox_host/exec/exec_manager.h"
#include "services/sandbox_host/sandbox_manager.h"
#include "tests/support/uid_range.h"

namespace corral::sandbox {

constexpr char kKey[] = "0123456789abcdef0123456789abcdef";

struct Collected {
  std::string out, err;
  ExitInfo exit;
};

// Feeds every event of an execution to `on_event` up to its exit (or until `until` says so), waiting on its
// listener (no sleeps); false when it did not exit in time. The wake-up state is shared: a listener call already under
// way may still run after SetListener(nullptr) returns.
inline bool DrainEvents(Execution& e, const std::function<void(const OutputEvent&)>& on_event,
                        absl::Duration limit = absl::Seconds(60), const std::function<bool()>& until = nullptr) {
  struct Wakeup {
    absl::Mutex mu;
    bool ready ABSL_GUARDED_BY(mu) = false;
  };
  auto wake = std::make_shared<Wakeup>();
  e.SetListener([wake] {
    absl::MutexLock lock(&wake->mu);
    wake->ready = true;
  });
  const absl::Time deadline = absl::Now() + limit;
  bool exited = false;
  while (!exited && absl::Now() < deadline) {
    while (std::optional<OutputEvent> ev = e.Next()) {
      on_event(*ev);
      if ((exited = ev->kind == OutputEvent::kExit)) break;
    }
    if (exited || (until && until())) break;
    absl::MutexLock lock(&wake->mu);
    wake->mu.AwaitWithDeadline(absl::Condition(&wake->ready), deadline);
    wake->ready = false;
  }
  e.SetListener(nullptr);
  return exited;
}

inline Collected Collect(Execution& e) {
  Collected c;
  const bool exited = DrainEvents(e, [&](const OutputEvent& ev) {
    if (ev.kind == OutputEvent::kStdout) c.out += ev.data;
    if (ev.kind == OutputEvent::kStderr) c.err += ev.data;
    if (ev.kind == OutputEvent::kExit) c.exit = ev.exit;
  });
  if (!exited) ADD_FAILURE() << "execution did not finish";
  return c;
}

class SandboxHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root";
    options_.root = "/var/tmp/corral-sbtest-" + std::to_string(getpid());
    // Each test process gets its own uid range: ctest runs cases in parallel.
    uids_.emplace(30000, 44999, 100);
    options_.uid_first = uids_->first();
    options_.uid_last = uids_->last();
    options_.capacity = 8;
    features_.landlock_abi = LandlockAbi();
    features_.mount_namespaces = CanUseMountNamespaces();
    cgroups_ = CgroupManager::Detect("corral-sbtest");
    features_.cgroups = &cgroups_;
    manager_ = std::make_unique<SandboxManager>(options_, features_, &clock_, &signer_);
    exec_ = std::make_unique<ExecManager>(&clock_);
  }
  void TearDown() override {
    clock_.Stop();  // first: a timer of the ExecManager's (an exit's cleanup) must not run once it is gone
    exec_.reset();
    manager_.reset();
    std::filesystem::remove_all(options_.root);
  }

  std::shared_ptr<const Sandbox> NewSandbox(SandboxSpec spec = {}) {
    auto r = manager_->Create(1, spec);
    EXPECT_THAT(r, IsOk());
    if (!r.ok() || r->created.empty()) return nullptr;
    return r->created[0].sandbox;
  }

  Collected Run(std::shared_ptr<const Sandbox> sb, std::vector<std::string> argv, ExecOptions o = {}) {
    o.argv = std::move(argv);
    auto e = exec_->Start(std::move(sb), o);
    EXPECT_THAT(e, IsOk());
    if (!e.ok()) return {};
    return Collect(**e);
  }

  std::optional<testing::UidRange> uids_;
  RealClock clock_;
  TokenSigner signer_ = *TokenSigner::FromKey(kKey);
  HostOptions options_;
  HostFeatures features_;
  CgroupManager cgroups_;
  std::unique_ptr<SandboxManager> manager_;
  std::unique_ptr<ExecManager> exec_;
};

}  // namespace corral::sandbox
