#include "tests/support/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"

namespace corral::testing {

std::string MakeTestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = absl::StrReplaceAll(absl::StrCat(info->test_suite_name(), ".", info->name()), {{"/", "_"}});
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / ("corral-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() >= deadline) return condition();
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

std::string WriteSecretFile(const std::string& dir) {
  std::string path = dir + "/secret";
  {
    std::ofstream out(path, std::ios::trunc);
    out << "integration-test-secret-0123456789abcdef\n";
  }
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::replace);
  return path;
}

}  // namespace corral::testing
