#include "services/sandbox_host/harness_inventory.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;

TEST(InstalledHarnesses, ListsTheVersionsWithAnInstalledProgramOnly) {
  const std::string root = testing::MakeTestDir() + "/harnesses";
  auto install = [&](const std::string& dir, bool with_program) {
    fs::create_directories(root + "/" + dir + "/node_modules/.bin");
    if (with_program) std::ofstream(root + "/" + dir + "/node_modules/.bin/codex") << "#!/bin/sh\n";
  };
  install("codex@0.171.0", true);
  install("codex@0.169.0", true);
  install("opencode@1.18.33", false);  // an install that failed half way: no program
  install("not-a-harness", true);      // no version
  install("@0.1.0", true);             // no name
  std::ofstream(root + "/.install.lock") << "";
  EXPECT_THAT(InstalledHarnesses(root), ::testing::ElementsAre("codex@0.169.0", "codex@0.171.0"));
  EXPECT_THAT(InstalledHarnesses(root + "/missing"), ::testing::IsEmpty());
}

}  // namespace
}  // namespace corral::sandbox
