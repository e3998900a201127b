#include "libs/harness/harnesses.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "tests/support/subprocess.h"

namespace corral {
namespace {

namespace fs = std::filesystem;

TEST(ResolveHarness, ANameIsThePinnedVersionAndAVersionMustBeOne) {
  auto codex = ResolveHarness("codex");
  ASSERT_THAT(codex, IsOk());
  EXPECT_EQ(codex->id(), "codex@" + std::string(codex->harness->version));
  EXPECT_EQ(codex->install(), "codex");
  auto other = ResolveHarness("codex@0.171.0");
  ASSERT_THAT(other, IsOk());
  EXPECT_EQ(other->install(), "codex@0.171.0");
  EXPECT_THAT(ResolveHarness("codex@0.1; rm -rf /").status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ResolveHarness("aider").status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST(InstalledHarnesses, ListsTheVersionsWhoseProgramIsInstalled) {
  const std::string root = testing::MakeTestDir() + "/harnesses";
  auto install = [&](const std::string& dir, const std::string& program) {
    fs::create_directories(root + "/" + dir + "/node_modules/.bin");
    if (program.empty()) return;
    const std::string path = root + "/" + dir + "/node_modules/.bin/" + program;
    std::ofstream(path) << "#!/bin/sh\n";
    chmod(path.c_str(), 0755);
  };
  install("codex@0.171.0", "codex");
  install("codex@0.169.0", "codex");
  install("opencode@1.18.33", "");        // an install that failed half way: no program
  install("claude-code@2.0.0", "other");  // not its program
  install("aider@1.0.0", "aider");        // not a harness Corral knows
  install("codex", "codex");              // no version
  std::ofstream(root + "/.install.lock") << "";
  std::vector<std::string> ids;
  for (const HarnessChoice& c : InstalledHarnesses(root)) ids.push_back(c.id());
  EXPECT_THAT(ids, ::testing::ElementsAre("codex@0.169.0", "codex@0.171.0"));
  EXPECT_THAT(InstalledHarnesses(root + "/missing"), ::testing::IsEmpty());
}

}  // namespace
}  // namespace corral
