// Landlock for sandbox processes: the best ruleset the running kernel's ABI allows. Planning (which rights
// are handled at which ABI) is a pure function the tests check ABI by ABI; building creates the ruleset in the
// host (it may allocate), and the child only calls RestrictSelf between fork and exec (async-signal-safe).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "libs/core/unique_fd.h"

namespace corral::sandbox {

// Access rights, as the kernel numbers them (defined here: Debian's headers stop at ABI 2).
namespace landlock {
inline constexpr uint64_t kExecute = 1ULL << 0;
inline constexpr uint64_t kWriteFile = 1ULL << 1;
inline constexpr uint64_t kReadFile = 1ULL << 2;
inline constexpr uint64_t kReadDir = 1ULL << 3;
inline constexpr uint64_t kRemoveDir = 1ULL << 4;
inline constexpr uint64_t kRemoveFile = 1ULL << 5;
inline constexpr uint64_t kMakeChar = 1ULL << 6;
inline constexpr uint64_t kMakeDir = 1ULL << 7;
inline constexpr uint64_t kMakeReg = 1ULL << 8;
inline constexpr uint64_t kMakeSock = 1ULL << 9;
inline constexpr uint64_t kMakeFifo = 1ULL << 10;
inline constexpr uint64_t kMakeBlock = 1ULL << 11;
inline constexpr uint64_t kMakeSym = 1ULL << 12;
inline constexpr uint64_t kRefer = 1ULL << 13;             // ABI 2
inline constexpr uint64_t kTruncate = 1ULL << 14;          // ABI 3
inline constexpr uint64_t kIoctlDev = 1ULL << 15;          // ABI 5
inline constexpr uint64_t kNetBindTcp = 1ULL << 0;         // ABI 4
inline constexpr uint64_t kNetConnectTcp = 1ULL << 1;      // ABI 4
inline constexpr uint64_t kScopeAbstractUnix = 1ULL << 0;  // ABI 6
inline constexpr uint64_t kScopeSignal = 1ULL << 1;        // ABI 6
}  // namespace landlock

enum class NetworkPolicy { kOpen, kProxyOnly, kNone };

struct LandlockPolicy {
  std::vector<std::string> read_write;  // the home, and directories bound into the sandbox's view
  std::vector<std::string> read_exec = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"};
  std::vector<std::string> read_only = {"/proc", "/sys"};
  std::vector<std::string> devices = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"};
  // Read-only directories given as open O_PATH descriptors — e.g. the sandbox's own /proc, whose inodes are
  // not the host's (a path-based rule on "/proc" would not cover it).
  std::vector<int> read_only_fds;
  // Directories given as descriptors where the sandbox may do anything — an image sandbox's root.
  std::vector<int> read_write_fds;
  NetworkPolicy network = NetworkPolicy::kOpen;
  std::vector<uint16_t> connect_ports;  // kProxyOnly: the only TCP ports connect() may reach
};

// What a ruleset enforces at a given ABI.
struct RulesetPlan {
  int abi = 0;
  uint64_t handled_fs = 0;
  uint64_t handled_net = 0;
  uint64_t scoped = 0;
  bool network_enforced = false;  // proxy_only/none restrictions expressible (ABI >= 4)
};

// The kernel's Landlock ABI version, or 0 when Landlock is unavailable or disabled.
int LandlockAbi();

// Which rights to handle at `abi`: every filesystem right the ABI knows; TCP bind always denied and connect
// restricted for kProxyOnly/kNone from ABI 4; abstract unix sockets and signals scoped from ABI 6.
RulesetPlan PlanRuleset(int abi, const LandlockPolicy& policy);

// Creates the ruleset (in the host; paths that do not exist are skipped). FAILED_PRECONDITION when the kernel
// refuses it.
absl::StatusOr<UniqueFd> BuildRuleset(const RulesetPlan& plan, const LandlockPolicy& policy);

// In the child, after PR_SET_NO_NEW_PRIVS: enforce the ruleset on this process and everything it starts.
// Returns 0 or an errno. Async-signal-safe.
int RestrictSelf(int ruleset_fd);

}  // namespace corral::sandbox
