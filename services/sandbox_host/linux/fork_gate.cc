#include "services/sandbox_host/linux/fork_gate.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "libs/core/status_macros.h"
#include "services/sandbox_host/linux/namespaces.h"
#include "services/sandbox_host/linux/user_namespaces.h"

namespace corral::sandbox {
namespace {

#if defined(__x86_64__)
constexpr uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kArch = AUDIT_ARCH_AARCH64;
#else
#error "the fork gate knows x86_64 and aarch64"
#endif

// Calls that change ids, namespaces or mounts: each goes to the host.
constexpr int kGated[] = {
    SYS_setuid,   SYS_setgid,     SYS_setreuid,  SYS_setregid,      SYS_setresuid,  SYS_setresgid,
    SYS_setfsuid, SYS_setfsgid,   SYS_setgroups, SYS_setns,         SYS_unshare,    SYS_mount,
    SYS_umount2,  SYS_pivot_root, SYS_chroot,    SYS_open_tree,     SYS_move_mount, SYS_fsopen,
    SYS_fsconfig, SYS_fsmount,    SYS_fspick,    SYS_mount_setattr,
};
constexpr uint32_t kCloneNamespaces =
    CLONE_NEWNS | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWCGROUP;

struct NetnsArgs {
  int userns_fd;
  int netns_fd = -1;
  int err = 0;
};

int MakeNetns(void* raw) {
  auto* a = static_cast<NetnsArgs*>(raw);
  if (setns(a->userns_fd, CLONE_NEWUSER) != 0 || unshare(CLONE_NEWNET) != 0 || !BringUpLoopback()) {
    a->err = errno;
    return 1;
  }
  a->netns_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);  // in the descriptor table it shares with us
  a->err = a->netns_fd < 0 ? errno : 0;
  return 0;
}

}  // namespace

absl::StatusOr<UniqueFd> CreateCopyNetworkNamespace(int copy_userns_fd) {
  NetnsArgs args{copy_userns_fd};
  CORRAL_RETURN_IF_ERROR(RunVforkHelper(MakeNetns, &args));
  if (args.netns_fd < 0) {
    return absl::InternalError(absl::StrCat("making a copy's network namespace: ", strerror(args.err)));
  }
  return UniqueFd(args.netns_fd);
}

absl::StatusOr<UniqueFd> CreateFamilyUserNamespace() {
  const IdMap all{{0, 0, 65536}};
  return CreateUserNamespace(all, all, /*setgroups=*/true);
}

absl::StatusOr<UniqueFd> CreateCopyUserNamespace(int family_fd, uid_t uid, gid_t gid) {
  return CreateUserNamespace(IdMap{{uid, uid, 1}}, IdMap{{gid, gid, 1}}, /*setgroups=*/true, family_fd);
}

int KeepForkCapabilities() {
  constexpr uint32_t keep = (1u << CAP_SYS_ADMIN) | (1u << CAP_SYS_CHROOT);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  data[0].permitted = data[0].effective = data[0].inheritable = keep;
  if (syscall(SYS_capset, &header, data) != 0) return errno;
  for (int cap : {CAP_SYS_ADMIN, CAP_SYS_CHROOT}) {
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0) return errno;
  }
  return 0;
}

int InstallForkGate() {
  constexpr size_t kGatedCount = sizeof(kGated) / sizeof(kGated[0]);
  // arch check (3), the number and x32's (3), one pair per gated call, clone (5), clone3 (2), allow (1)
  sock_filter program[3 + 3 + 2 * kGatedCount + 5 + 2 + 1];
  size_t n = 0;
  auto put = [&](sock_filter f) { program[n++] = f; };
  put(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
  put(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0));
  put(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  put(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
  put(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));  // x86_64's x32 numbers: the same calls, renamed
  put(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  for (int nr : kGated) {
    put(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1));
    put(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF));
  }
  // clone: only with a namespace flag (its first argument's low word; the rest of the flags are below 2^32).
  put(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 4));
  put(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])));
  put(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, kCloneNamespaces, 0, 1));
  put(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF));
  put(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  put(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1));
  put(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS));
  put(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  sock_fprog prog{static_cast<unsigned short>(n), program};
  return static_cast<int>(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog));
}

namespace {

// One byte with room for one descriptor (SCM_RIGHTS), as both ends use it.
struct FdMessage {
  char byte = 'f';
  iovec io{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage() {
    msg.msg_iov = &io;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
  }
  FdMessage(const FdMessage&) = delete;
};

}  // namespace

bool SendFd(int socket_fd, int fd) {
  FdMessage m;
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  return sendmsg(socket_fd, &m.msg, MSG_NOSIGNAL) == 1;
}

absl::StatusOr<UniqueFd> ReceiveFd(int socket_fd) {
  FdMessage m;
  ssize_t got;
  do {
    got = recvmsg(socket_fd, &m.msg, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got != 1) {
    return absl::InternalError(absl::StrCat("receiving a descriptor: ", got < 0 ? strerror(errno) : "none"));
  }
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int))) {
    return absl::InternalError("receiving a descriptor: none came");
  }
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return UniqueFd(fd);
}

}  // namespace corral::sandbox
