// The fixture of the tests that fork sandboxes for real (root): a manager with fork layers, and helpers to run a
// shell script, find a sandbox's current generation and fork it.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "libs/core/testing/fake_clock.h"
#include "services/sandbox_host/fork/fork_layers.h"
#include "services/sandbox_host/images/image_root.h"
#include "services/sandbox_host/tests/manager_fixture.h"

namespace corral::sandbox {

class ForkTest : public SandboxHostTest {
 protected:
  void SetUp() override {
    SandboxHostTest::SetUp();
    if (IsSkipped()) return;
    manager_.reset();
    std::filesystem::create_directories(options_.root + "/homes");
    features_.forks = features_.mount_namespaces && CanUseImages(options_.root + "/homes");
    if (!features_.forks) GTEST_SKIP() << "no idmapped mounts here";
    layers_ = std::make_unique<ForkLayers>(options_.root);
    options_.capacity = 16;
    manager_ = std::make_unique<SandboxManager>(options_, features_, &clock_, &signer_,
                                                SandboxManagerParts{.layers = layers_.get()});
  }
  void TearDown() override {
    SandboxHostTest::TearDown();
    layers_.reset();
  }

  std::string Sh(const std::shared_ptr<const Sandbox>& sb, const std::string& script) {
    Collected c = Run(sb, {"sh", "-c", script});
    EXPECT_EQ(c.exit.exit_code, 0) << script << ": " << c.err;
    return c.out;
  }
  std::shared_ptr<const Sandbox> Current(const std::string& id) {
    auto sb = manager_->Find(id);
    EXPECT_THAT(sb, IsOk());
    return sb.ok() ? *sb : nullptr;
  }
  // The sandbox the manager lists under `id` (without Find, which would build a forked parent's new generation),
  // or null.
  const Sandbox* Listed(const std::string& id) const {
    for (const auto& sb : manager_->List()) {
      if (sb->id == id) return sb.get();
    }
    return nullptr;
  }
  std::vector<std::shared_ptr<const Sandbox>> Fork(const std::string& id, int n, bool empty_tmp = false) {
    auto r = manager_->Fork(id, n, {}, absl::ZeroDuration(), empty_tmp);
    EXPECT_THAT(r, IsOk());
    std::vector<std::shared_ptr<const Sandbox>> out;
    if (r.ok()) {
      for (auto& c : r->created) out.push_back(c.sandbox);
    }
    return out;
  }
  size_t LayersOnDisk() const {
    std::error_code ec;
    size_t n = 0;
    for (auto it = std::filesystem::directory_iterator(layers_->dir(), ec);
         !ec && it != std::filesystem::directory_iterator(); ++it)
      ++n;
    return n;
  }

  std::unique_ptr<ForkLayers> layers_;
  FakeClock fake_clock_;  // for a manager of a test's own (the fixture's runs on real time)
};

}  // namespace corral::sandbox
