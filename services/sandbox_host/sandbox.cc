#include "services/sandbox_host/sandbox.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "libs/core/status_macros.h"
#include "services/sandbox_host/images/image_user.h"

namespace corral::sandbox {

SpawnSpec Sandbox::SpawnFor(std::vector<std::string> argv, const std::map<std::string, std::string>& env,
                            const std::string& cwd, const std::optional<InsideUser>& user) const {
  SpawnSpec s;
  s.argv = std::move(argv);
  // The exec's own values first, then the sandbox's; each name once (programs disagree on which duplicate wins).
  absl::flat_hash_set<absl::string_view> seen;
  auto add = [&](const std::string& kv) {
    if (seen.insert(absl::string_view(kv).substr(0, kv.find('='))).second) s.env.push_back(kv);
  };
  std::vector<std::string> own;
  if (user) own.push_back("HOME=" + user->home);
  for (const auto& [k, v] : env) own.push_back(absl::StrCat(k, "=", v));
  for (const auto& kv : own) add(kv);
  for (const auto& kv : base_env) add(kv);
  s.cwd = !cwd.empty() ? cwd : image ? image->workdir : home;
  s.uid = user ? user->uid : image ? image->inside_uid : uid;
  s.gid = user ? user->gid : image ? image->inside_gid : uid;
  s.limits = spec.rlimits;
  s.landlock_fd = landlock.valid() ? landlock.get() : -1;
  s.mountns_fd = namespaces.mnt.valid() ? namespaces.mnt.get() : -1;
  s.netns_fd = namespaces.net.valid() ? namespaces.net.get() : -1;
  s.userns_fd = image && image->userns.valid() ? image->userns.get() : -1;
  s.root_fd = in_image() ? home_fd.get() : -1;
  s.cgroup_procs_fds = cgroup.procs_fds();
  return s;
}

absl::StatusOr<std::optional<InsideUser>> Sandbox::ResolveUser(const std::string& name) const {
  if (name.empty()) return std::nullopt;
  if (!in_image()) {
    return absl::FailedPreconditionError(
        absl::StrCat("command.user '", name,
                     "': a sandbox on the host's filesystem has one user, its own uid; users are served in sandboxes "
                     "made from an image"));
  }
  CORRAL_ASSIGN_OR_RETURN(ImageUser found, ResolveUserInRoot(home_fd.get(), name));
  if (found.uid == image->inside_uid && found.gid == image->inside_gid) return InsideUser{found.uid, found.gid, home};
  if (!image->sub_ids) {
    return absl::FailedPreconditionError(absl::StrCat("command.user '", name,
                                                      "': this host maps one id per sandbox (the image's user, uid ",
                                                      image->inside_uid, "), so no other user can run here"));
  }
  return InsideUser{found.uid, found.gid, found.home};
}

absl::StatusOr<SandboxPath> Sandbox::ParsePath(absl::string_view path, bool allow_home) const {
  if (!in_image()) return ParseSandboxPath(path, spec.task_paths, allow_home);
  std::vector<std::string> base = absl::StrSplit(home, '/', absl::SkipEmpty());
  return ParseImagePath(path, base, allow_home);
}

}  // namespace corral::sandbox
