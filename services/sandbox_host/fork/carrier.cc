#include "services/sandbox_host/fork/carrier.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "libs/core/status_macros.h"
#include "services/sandbox_host/linux/carry_root.h"
#include "services/sandbox_host/linux/fork_gate.h"
#include "services/sandbox_host/linux/landlock.h"

namespace corral::sandbox {

absl::StatusOr<std::unique_ptr<Carrier>> Carrier::Create(const std::string& views_dir, const std::string& lib_dir) {
  auto family = CreateFamilyUserNamespace();
  if (!family.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("processes cannot be carried into forks here: ", family.status().message()));
  }
  std::error_code ec;
  std::filesystem::remove_all(views_dir, ec);
  std::filesystem::create_directories(views_dir, ec);
  chmod(views_dir.c_str(), 0700);
  return std::unique_ptr<Carrier>(new Carrier(*std::move(family), views_dir, lib_dir));
}

absl::StatusOr<std::shared_ptr<const CarryView>> Carrier::ViewFor(const Sandbox& sb) {
  absl::MutexLock lock(&sb.fork_ready->mu);
  if (sb.carry_view != nullptr) return sb.carry_view;
  if (sb.in_image() || !sb.namespaces.mnt.valid()) {
    return absl::FailedPreconditionError(
        "a fork-ready process runs in a sandbox on the host's filesystem with a mount namespace of its own");
  }
  std::vector<std::string> writable{sb.home, "/tmp"};
  for (const std::string& p : sb.spec.task_paths) writable.push_back(p);
  const std::string staging = absl::StrCat(views_dir_, "/", sb.id, "-", next_view_++);
  if (mkdir(staging.c_str(), 0700) != 0) return absl::InternalError(absl::StrCat("mkdir ", staging));
  std::vector<std::string> read_only = LandlockPolicy{}.read_exec;
  read_only.push_back(lib_dir_);
  absl::StatusOr<CarryRoot> root = CreateCarryRoot(sb.namespaces.mnt.get(), staging, writable, read_only);
  rmdir(staging.c_str());  // mounted on in the new namespace only
  if (!root.ok()) return root.status();
  auto view = std::make_shared<CarryView>();
  view->mnt = std::move(root->mnt);
  view->root = std::move(root->root);
  if (const int abi = LandlockAbi(); abi > 0) {
    // Everything beneath its root, and nothing else (what is read-only there is mounted so).
    LandlockPolicy policy{.read_write = {}, .read_exec = {}, .read_only = {}, .devices = {}};
    policy.read_write_fds = {view->root.get()};
    policy.network = sb.protections.network;
    policy.connect_ports = sb.spec.allowed_ports;
    CORRAL_ASSIGN_OR_RETURN(view->landlock, BuildRuleset(PlanRuleset(abi, policy), policy));
  }
  sb.carry_view = view;
  return view;
}

}  // namespace corral::sandbox
