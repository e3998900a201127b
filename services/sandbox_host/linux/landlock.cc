#include "services/sandbox_host/linux/landlock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "libs/core/status_macros.h"

namespace corral::sandbox {
namespace {

using namespace landlock;  // NOLINT: the right names read best unqualified here

constexpr unsigned kCreateRulesetVersion = 1U << 0;
constexpr int kRulePathBeneath = 1;
constexpr int kRuleNetPort = 2;

// The kernel's structs, as of ABI 6 (older kernels take a prefix of the ruleset attribute).
struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};
struct __attribute__((packed)) PathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
};
struct NetPortAttr {
  uint64_t allowed_access;
  uint64_t port;
};

constexpr uint64_t kFsAbi1 = kExecute | kWriteFile | kReadFile | kReadDir | kRemoveDir | kRemoveFile | kMakeChar |
                             kMakeDir | kMakeReg | kMakeSock | kMakeFifo | kMakeBlock | kMakeSym;
// Rights that apply to a non-directory file; a rule on a file may grant only these.
constexpr uint64_t kFileRights = kExecute | kWriteFile | kReadFile | kTruncate | kIoctlDev;

absl::Status AddPathRule(int ruleset, const std::string& path, uint64_t access, uint64_t handled) {
  int fd = open(path.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) return absl::OkStatus();  // absent on this image: nothing to allow
  struct stat st {};
  fstat(fd, &st);
  access &= handled;
  if (!S_ISDIR(st.st_mode)) access &= kFileRights;
  PathBeneathAttr attr{access, fd};
  long rc = access == 0 ? 0 : syscall(SYS_landlock_add_rule, ruleset, kRulePathBeneath, &attr, 0);
  int err = errno;
  close(fd);
  if (rc != 0) return absl::FailedPreconditionError(absl::StrCat("landlock rule for ", path, ": ", strerror(err)));
  return absl::OkStatus();
}

}  // namespace

int LandlockAbi() {
  long abi = syscall(SYS_landlock_create_ruleset, nullptr, 0, kCreateRulesetVersion);
  return abi < 0 ? 0 : static_cast<int>(abi);
}

RulesetPlan PlanRuleset(int abi, const LandlockPolicy& policy) {
  RulesetPlan plan;
  plan.abi = abi;
  if (abi < 1) return plan;
  plan.handled_fs = kFsAbi1;
  if (abi >= 2) plan.handled_fs |= kRefer;
  if (abi >= 3) plan.handled_fs |= kTruncate;
  if (abi >= 5) plan.handled_fs |= kIoctlDev;
  if (abi >= 4) {
    // No sandbox may listen on TCP in the host's network. With NONE it has a network namespace of its own with
    // only loopback, which no one else reaches: there it may listen and connect (a task's environment server).
    if (policy.network == NetworkPolicy::kOpen) plan.handled_net = kNetBindTcp;
    if (policy.network == NetworkPolicy::kProxyOnly) plan.handled_net = kNetBindTcp | kNetConnectTcp;
    plan.network_enforced = true;
  }
  if (abi >= 6) plan.scoped = kScopeAbstractUnix | kScopeSignal;
  return plan;
}

absl::StatusOr<UniqueFd> BuildRuleset(const RulesetPlan& plan, const LandlockPolicy& policy) {
  if (plan.abi < 1) return absl::FailedPreconditionError("Landlock is not available in this kernel");
  RulesetAttr attr{plan.handled_fs, plan.handled_net, plan.scoped};
  const size_t size = plan.abi >= 6 ? sizeof(RulesetAttr) : plan.abi >= 4 ? 2 * sizeof(uint64_t) : sizeof(uint64_t);
  long fd = syscall(SYS_landlock_create_ruleset, &attr, size, 0);
  if (fd < 0) return absl::FailedPreconditionError(absl::StrCat("landlock_create_ruleset: ", strerror(errno)));
  UniqueFd ruleset(static_cast<int>(fd));
  const uint64_t all = plan.handled_fs;
  for (const auto& p : policy.read_write) {
    if (auto s = AddPathRule(ruleset.get(), p, all, all); !s.ok()) return s;
  }
  for (const auto& p : policy.read_exec) {
    if (auto s = AddPathRule(ruleset.get(), p, kExecute | kReadFile | kReadDir, all); !s.ok()) return s;
  }
  for (const auto& p : policy.read_only) {
    if (auto s = AddPathRule(ruleset.get(), p, kReadFile | kReadDir, all); !s.ok()) return s;
  }
  auto add_fd_rule = [&](int dir_fd, uint64_t access) {
    PathBeneathAttr rule{access & all, dir_fd};
    return syscall(SYS_landlock_add_rule, ruleset.get(), kRulePathBeneath, &rule, 0) == 0
               ? absl::OkStatus()
               : absl::FailedPreconditionError(
                     absl::StrCat("landlock rule for a namespace directory: ", strerror(errno)));
  };
  for (int dir_fd : policy.read_only_fds) CORRAL_RETURN_IF_ERROR(add_fd_rule(dir_fd, kReadFile | kReadDir));
  for (int dir_fd : policy.read_write_fds) CORRAL_RETURN_IF_ERROR(add_fd_rule(dir_fd, all));
  for (const auto& p : policy.devices) {
    if (auto s = AddPathRule(ruleset.get(), p, kReadFile | kWriteFile | kIoctlDev, all); !s.ok()) return s;
  }
  if ((plan.handled_net & kNetConnectTcp) && policy.network == NetworkPolicy::kProxyOnly) {
    for (uint16_t port : policy.connect_ports) {
      NetPortAttr net{kNetConnectTcp, port};
      if (syscall(SYS_landlock_add_rule, ruleset.get(), kRuleNetPort, &net, 0) != 0) {
        return absl::FailedPreconditionError(absl::StrCat("landlock port rule ", port, ": ", strerror(errno)));
      }
    }
  }
  return ruleset;
}

int RestrictSelf(int ruleset_fd) { return syscall(SYS_landlock_restrict_self, ruleset_fd, 0) == 0 ? 0 : errno; }

}  // namespace corral::sandbox
