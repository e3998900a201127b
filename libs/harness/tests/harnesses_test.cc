#include "libs/harness/harnesses.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "libs/trajectory/roles.h"
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

// Each harness's role rules reach a session policy valid, in order, and match the side calls they describe.
TEST(HarnessRoles, EveryHarnessHasValidRulesAndOpenCodesTitleCallMatches) {
  for (const Harness& h : Harnesses()) {
    v1::SessionPolicy policy;
    policy.add_role_rules()->set_reason("the task's own, first");
    AddRoleRules(h, policy);
    ASSERT_EQ(policy.role_rules_size(), 1 + static_cast<int>(h.roles.size())) << h.name;
    EXPECT_EQ(policy.role_rules(0).reason(), "the task's own, first");
    policy.mutable_role_rules()->DeleteSubrange(0, 1);
    EXPECT_THAT(ValidateRoleRules(policy.role_rules()), IsOk()) << h.name;
    EXPECT_FALSE(h.roles.empty()) << h.name;
  }
  v1::SessionPolicy policy;
  AddRoleRules(*ResolveHarness("opencode")->harness, policy);
  v1::RecordedCall title;
  title.add_prompt()->set_role("system");
  title.mutable_prompt(0)->set_content("You are a title generator. You output ONLY a thread title. Nothing else.");
  title.add_prompt()->set_role("user");
  title.mutable_prompt(1)->set_content("fix the bug");
  const auto verdict = MatchRoleRule(policy.role_rules(), title);
  ASSERT_TRUE(verdict.has_value());
  EXPECT_EQ(verdict->role, v1::CALL_ROLE_AUXILIARY);
  EXPECT_EQ(verdict->reason, "title generator (opencode)");
  title.mutable_prompt(0)->set_content("You are opencode, an interactive CLI tool");
  EXPECT_FALSE(MatchRoleRule(policy.role_rules(), title).has_value());
}

// Gemini CLI's checks run under system prompts of their own, or ask within the agent's conversation.
TEST(HarnessRoles, GeminiClisChecksAreSideCalls) {
  v1::SessionPolicy policy;
  AddRoleRules(*ResolveHarness("gemini-cli")->harness, policy);
  v1::RecordedCall check;
  check.add_prompt()->set_role("system");
  check.mutable_prompt(0)->set_content(
      "You are a diagnostic agent that determines whether a conversational AI assistant is stuck in an unproductive "
      "loop.");
  check.add_prompt()->set_role("user");
  check.mutable_prompt(1)->set_content("Recent conversation history: ...");
  auto verdict = MatchRoleRule(policy.role_rules(), check);
  ASSERT_TRUE(verdict.has_value());
  EXPECT_EQ(verdict->role, v1::CALL_ROLE_AUXILIARY);
  EXPECT_EQ(verdict->reason, "loop check (gemini-cli)");
  check.mutable_prompt(0)->set_content("You are Gemini CLI, an autonomous CLI agent");
  EXPECT_FALSE(MatchRoleRule(policy.role_rules(), check).has_value());  // the agent's own turn
  check.mutable_prompt(1)->set_content(
      "Analyze *only* the content and structure of your immediately preceding response (your last turn).");
  verdict = MatchRoleRule(policy.role_rules(), check);
  ASSERT_TRUE(verdict.has_value());
  EXPECT_EQ(verdict->reason, "next speaker check (gemini-cli)");
}

}  // namespace
}  // namespace corral
