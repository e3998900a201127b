// `corral harness list|install`: the agent harnesses a task can name (AgentSpec.harness), and their installation
// on a host — once per host, with npm, at the pinned version, under /opt/corral/harnesses where every sandbox may
// run it.
#include <fcntl.h>
#include <spawn.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "libs/core/unique_fd.h"
#include "libs/harness/harnesses.h"
#include "tools/corral/commands.h"

extern char** environ;

namespace corral::cli {
namespace {

namespace fs = std::filesystem;

// Runs argv (stdout and stderr are the CLI's); its exit code, or -1 when it could not start.
int Run(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int List(const std::string& root) {
  absl::PrintF("%-12s %-10s %-28s %-24s %s\n", "HARNESS", "PINNED", "PACKAGE", "API", "INSTALLED HERE");
  for (const Harness& h : Harnesses()) {
    // Every version installed under the root, the pinned one first.
    std::vector<std::string> installed;
    for (const HarnessChoice& c : InstalledHarnesses(root)) {
      if (c.harness != &h) continue;
      installed.insert(c.version == h.version ? installed.begin() : installed.end(), c.version);
    }
    absl::PrintF("%-12s %-10s %-28s %-24s %s\n", h.name, h.version, h.package, h.api,
                 installed.empty() ? "no" : absl::StrJoin(installed, ", "));
  }
  absl::PrintF("\n(under %s; `corral harness install NAME[@VERSION]` adds one)\n", root);
  return 0;
}

int Install(const std::vector<std::string>& names, const std::string& root) {
  std::vector<HarnessChoice> chosen;
  // No names: the pinned set, every harness at the version Corral is tested with.
  const std::vector<std::string> wanted = names.empty() ? std::vector<std::string>{"all"} : names;
  for (const std::string& name : wanted) {
    if (name == "all") {
      for (const Harness& h : Harnesses()) chosen.push_back(*ResolveHarness(h.name));
      continue;
    }
    auto choice = ResolveHarness(name);
    if (!choice.ok()) {
      std::cerr << "corral harness install: " << choice.status().message() << " (or all)\n";
      return 2;
    }
    chosen.push_back(*choice);
  }
  std::error_code mkdir_error;
  fs::create_directories(root, mkdir_error);
  // One install at a time per root (two hosts' boot scripts, parallel tests): the next one finds it installed.
  UniqueFd lock(open((root + "/.install.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock.valid() || flock(lock.get(), LOCK_EX) != 0) {
    std::cerr << "corral harness install: cannot lock " << root << "/.install.lock: " << strerror(errno) << "\n";
    return 1;
  }
  for (const HarnessChoice& c : chosen) {
    const Harness& h = *c.harness;
    const std::string dir = InstallDir(root, c);
    const std::string program = ProgramPath(root, c);
    if (access(program.c_str(), X_OK) == 0) {
      std::cout << h.name << " " << c.version << ": already installed at " << program << "\n";
      continue;
    }
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      std::cerr << "corral harness install: cannot create " << dir << ": " << ec.message() << "\n";
      return 1;
    }
    std::cout << h.name << " " << c.version << ": npm install " << h.package << "@" << c.version
              << (h.runtime.empty() ? "" : " ") << h.runtime << " into " << dir << "\n"
              << std::flush;
    // A pinned version never changes: what npm's cache holds is as good as the registry's.
    std::vector<std::string> npm = {"npm",
                                    "install",
                                    "--prefix",
                                    dir,
                                    "--no-save",
                                    "--no-audit",
                                    "--no-fund",
                                    "--prefer-offline",
                                    "--loglevel=error",
                                    absl::StrCat(h.package, "@", c.version)};
    if (!h.runtime.empty()) npm.emplace_back(h.runtime);  // the Node.js it runs on, beside it
    const int code = Run(npm);
    if (code != 0) {
      std::cerr << "corral harness install: npm exited with " << code
                << (code < 0 ? " (is npm installed? apt-get install npm)" : "") << "; " << h.name << " " << c.version
                << " is not installed\n";
      return 1;
    }
    // Every sandbox uid runs it: the tree must be readable and searchable by all.
    if (Run({"chmod", "-R", "a+rX", dir}) != 0 || access(program.c_str(), X_OK) != 0) {
      std::cerr << "corral harness install: npm finished but " << program << " is not there\n";
      return 1;
    }
    std::cout << h.name << " " << c.version << ": installed at " << program
              << (c.version == h.version ? "" : " (not the pinned version: untested with this Corral)") << "\n";
  }
  return 0;
}

}  // namespace

void RegisterHarness(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("harness", "agent harnesses a task can name (agent.harness, corral run --agent NAME)");
  cmd->require_subcommand(1);
  static std::string root(kHarnessRoot);
  cmd->add_option("--root", root, "where harnesses are installed (sandboxes find them here)")->capture_default_str();

  auto* list = cmd->add_subcommand("list", "the known harnesses, their pinned versions, and whether installed here");
  list->callback([&exit_code] { exit_code = List(root); });

  static std::vector<std::string> names;
  auto* install = cmd->add_subcommand(
      "install",
      "install harnesses on this host with npm (once per host; idempotent): NAME for the pinned version, "
      "NAME@VERSION for another; no name installs every harness at its pinned version");
  install->add_option("names", names, "NAME, NAME@VERSION or all (default: all, pinned)");
  install->callback([&exit_code] { exit_code = Install(names, root); });
}

}  // namespace corral::cli
