// The verifier's environment and files, as pure functions (verifier_hygiene.h).
#include "services/scheduler/episode/verifier_hygiene.h"

#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace corral::scheduler {

std::vector<v1::InlineFile> VerifierFiles(const v1::VerifierSpec& verifier, const std::string& workdir) {
  std::vector<v1::InlineFile> files(verifier.files().begin(), verifier.files().end());
  const std::string& cwd = verifier.command().cwd().empty() ? workdir : verifier.command().cwd();
  for (v1::InlineFile& f : files) {
    if (!cwd.empty() && !absl::StartsWith(f.path(), "/")) f.set_path(absl::StrCat(cwd, "/", f.path()));
  }
  return files;
}

std::string OwnDirectory(const std::vector<v1::InlineFile>& files) {
  std::vector<absl::string_view> common;
  bool first = true;
  for (const v1::InlineFile& f : files) {
    std::vector<absl::string_view> dirs = absl::StrSplit(f.path(), '/');
    dirs.pop_back();  // the file's own name
    if (first) {
      common = dirs;
      first = false;
      continue;
    }
    size_t n = 0;
    while (n < common.size() && n < dirs.size() && common[n] == dirs[n]) ++n;
    common.resize(n);
  }
  const std::string dir = absl::StrJoin(common, "/");
  return dir.empty() || dir == "/" ? "" : dir;
}

void MakeEnvClean(v1::Command& command, const std::string& own_dir) {
  auto& env = *command.mutable_env();
  env.insert({"PYTHONSAFEPATH", "1"});
  if (!own_dir.empty()) env.insert({"PYTEST_ADDOPTS", absl::StrCat("--confcutdir=", own_dir)});
  if (!env.contains("GIT_CONFIG_COUNT")) {
    const std::pair<const char*, const char*> git[] = {{"core.fsmonitor", "false"}, {"core.hooksPath", "/dev/null"}};
    env["GIT_CONFIG_COUNT"] = absl::StrCat(std::size(git));
    for (size_t i = 0; i < std::size(git); ++i) {
      env[absl::StrCat("GIT_CONFIG_KEY_", i)] = git[i].first;
      env[absl::StrCat("GIT_CONFIG_VALUE_", i)] = git[i].second;
    }
  }
  // An exec may not set HOME: the shell does, to the task's own choice when its verifier env names one.
  if (auto home = env.find("HOME"); home != env.end()) {
    env["CORRAL_VERIFIER_HOME"] = home->second;
    env.erase(home);
  }
  google::protobuf::RepeatedPtrField<std::string> argv;
  for (const char* arg :
       {"sh", "-c",
        "PYTHONPATH=\"$HOME/.corral/verifier-python${PYTHONPATH:+:$PYTHONPATH}\"; "
        "HOME=\"${CORRAL_VERIFIER_HOME:-$HOME/.corral/verifier-home}\"; export HOME PYTHONPATH; exec \"$@\"",
        "verifier"}) {
    *argv.Add() = arg;
  }
  for (const std::string& arg : command.argv()) *argv.Add() = arg;
  *command.mutable_argv() = std::move(argv);
}

std::optional<Failure> CouldNotRun(const RewardOutcome& reward, std::optional<int> exit_code, const std::string& tail) {
  if (reward.source != "exit_code" || !exit_code || (*exit_code != 126 && *exit_code != 127)) return std::nullopt;
  return Failure{
      v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_VERIFIER, v1::EPISODE_PHASE_VERIFIER,
      absl::StrCat("the verifier could not run (exit ", *exit_code,
                   *exit_code == 127 ? ": a program or script it names was not found"
                                     : ": something it runs may not be executed",
                   ") and left no reward; the task is broken, not the agent; output: ", tail.substr(0, 512))};
}

}  // namespace corral::scheduler
