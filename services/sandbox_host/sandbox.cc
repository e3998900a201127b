#include "services/sandbox_host/sandbox.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace corral::sandbox {

SpawnSpec Sandbox::SpawnFor(std::vector<std::string> argv, const std::map<std::string, std::string>& env,
                            const std::string& cwd) const {
  SpawnSpec s;
  s.argv = std::move(argv);
  // The exec's own values first, then the sandbox's; each name once (programs disagree on which duplicate wins).
  absl::flat_hash_set<absl::string_view> seen;
  auto add = [&](const std::string& kv) {
    if (seen.insert(absl::string_view(kv).substr(0, kv.find('='))).second) s.env.push_back(kv);
  };
  std::vector<std::string> own;
  for (const auto& [k, v] : env) own.push_back(absl::StrCat(k, "=", v));
  for (const auto& kv : own) add(kv);
  for (const auto& kv : base_env) add(kv);
  s.cwd = !cwd.empty() ? cwd : image ? image->workdir : home;
  s.uid = image ? image->inside_uid : uid;
  s.gid = image ? image->inside_gid : uid;
  s.limits = spec.rlimits;
  s.landlock_fd = landlock.valid() ? landlock.get() : -1;
  s.mountns_fd = namespaces.mnt.valid() ? namespaces.mnt.get() : -1;
  s.netns_fd = namespaces.net.valid() ? namespaces.net.get() : -1;
  s.userns_fd = image && image->userns.valid() ? image->userns.get() : -1;
  s.root_fd = in_image() ? home_fd.get() : -1;
  s.cgroup_procs_fds = cgroup.procs_fds();
  return s;
}

absl::StatusOr<SandboxPath> Sandbox::ParsePath(absl::string_view path, bool allow_home) const {
  if (!in_image()) return ParseSandboxPath(path, spec.task_paths, allow_home);
  std::vector<std::string> base = absl::StrSplit(home, '/', absl::SkipEmpty());
  return ParseImagePath(path, base, allow_home);
}

}  // namespace corral::sandbox
