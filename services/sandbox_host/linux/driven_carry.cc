#include "services/sandbox_host/linux/driven_carry.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "libs/core/status_macros.h"
#include "libs/core/unique_fd.h"
#include "services/sandbox_host/linux/carry_plan.h"
#include "services/sandbox_host/linux/tracee.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox {
namespace {

// Runs `nr` in `t`: an error for a call that failed.
absl::Status Must(Tracee& t, absl::string_view what, long nr, std::initializer_list<uint64_t> args) {
  CORRAL_ASSIGN_OR_RETURN(long result, t.Call(nr, args));
  if (result < 0) {
    return absl::InternalError(
        absl::StrCat("process ", t.pid(), ": ", what, ": ", strerror(static_cast<int>(-result))));
  }
  return absl::OkStatus();
}

// The plan the gate installed at kCarryPlanFd, read through a duplicate of that descriptor: step → argument.
absl::StatusOr<std::map<std::string, std::string>> ReadPlan(pid_t pid) {
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  UniqueFd text(pidfd.valid() ? static_cast<int>(syscall(SYS_pidfd_getfd, pidfd.get(), kCarryPlanFd, 0)) : -1);
  if (!text.valid()) return absl::InternalError(absl::StrCat("reading the plan of ", pid, ": ", strerror(errno)));
  std::string data;
  char buf[4096];
  for (ssize_t n; (n = read(text.get(), buf, sizeof(buf))) > 0;) data.append(buf, static_cast<size_t>(n));
  std::map<std::string, std::string> plan;
  for (absl::string_view line : absl::StrSplit(data, '\n')) {
    if (line == "end") return plan;
    std::pair<std::string, std::string> step = absl::StrSplit(line, absl::MaxSplits(' ', 1));
    plan[step.first] = step.second;
  }
  return absl::InternalError("the carry plan ended early");
}

// What corral_carry.carry() does after its announcement returned, step for step.
absl::Status Steps(Tracee& t, const std::vector<StreamCopy>& streams) {
  CORRAL_ASSIGN_OR_RETURN(long announced, t.Finish());
  if (announced != 0) return absl::CancelledError("the gate gave it no plan");
  for (const StreamCopy& c : streams) {  // its duplicates of its streams, of its new ones now
    CORRAL_RETURN_IF_ERROR(Must(t, "duplicating a stream", SYS_dup3,
                                {uint64_t(c.stream), uint64_t(c.fd), c.cloexec ? uint64_t(O_CLOEXEC) : 0}));
  }
  CORRAL_ASSIGN_OR_RETURN(auto plan, ReadPlan(t.pid()));
  CORRAL_RETURN_IF_ERROR(Must(t, "closing the plan", SYS_close, {kCarryPlanFd}));
  int uid = -1, gid = -1;
  std::pair<std::string, std::string> ids = absl::StrSplit(plan["ids"], ' ');
  if (!absl::SimpleAtoi(ids.first, &uid) || !absl::SimpleAtoi(ids.second, &gid)) {
    return absl::InternalError(absl::StrCat("a plan without ids: ", plan["ids"]));
  }
  std::vector<int> fds;
  for (const auto& [step, flag] :
       {std::pair{"userns", CLONE_NEWUSER}, {"netns", CLONE_NEWNET}, {"mntns", CLONE_NEWNS}}) {
    int fd = -1;
    if (!plan.contains(step) || !absl::SimpleAtoi(plan[step], &fd)) continue;
    fds.push_back(fd);
    CORRAL_RETURN_IF_ERROR(Must(t, absl::StrCat("joining its ", step), SYS_setns,
                                {static_cast<uint64_t>(fd), static_cast<uint64_t>(flag)}));
    if (flag == CLONE_NEWUSER) {  // a copy becomes its child's ids first
      CORRAL_RETURN_IF_ERROR(Must(t, "setgroups", SYS_setgroups, {0, 0}));
      CORRAL_RETURN_IF_ERROR(Must(t, "setresgid", SYS_setresgid, {uint64_t(gid), uint64_t(gid), uint64_t(gid)}));
      CORRAL_RETURN_IF_ERROR(Must(t, "setresuid", SYS_setresuid, {uint64_t(uid), uint64_t(uid), uint64_t(uid)}));
    }
  }
  for (int fd : fds) CORRAL_RETURN_IF_ERROR(Must(t, "closing a namespace", SYS_close, {static_cast<uint64_t>(fd)}));
  if (plan.contains("cwd")) {
    CORRAL_ASSIGN_OR_RETURN(uint64_t path, t.Put(absl::string_view(plan["cwd"].c_str(), plan["cwd"].size() + 1)));
    CORRAL_RETURN_IF_ERROR(Must(t, "chdir", SYS_chdir, {path}));
  }
  if (!plan.contains("ready")) {
    CORRAL_RETURN_IF_ERROR(
        Must(t, "clearing ambient capabilities", SYS_prctl, {PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0}));
    const __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    const __user_cap_data_struct none[2] = {};
    CORRAL_ASSIGN_OR_RETURN(uint64_t h,
                            t.Put(absl::string_view(reinterpret_cast<const char*>(&header), sizeof(header))));
    CORRAL_ASSIGN_OR_RETURN(uint64_t d, t.Put(absl::string_view(reinterpret_cast<const char*>(none), sizeof(none))));
    CORRAL_RETURN_IF_ERROR(Must(t, "dropping capabilities", SYS_capset, {h, d}));
  }
  CORRAL_RETURN_IF_ERROR(Must(t, "finishing the carry", SYS_unshare, {0}));  // the gate checks it first
  return t.Release();
}

}  // namespace

absl::StatusOr<std::vector<StreamCopy>> CheckDrivable(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(status, line);) {
    if (absl::StartsWith(line, "Threads:") && line != "Threads:\t1") {
      return absl::FailedPreconditionError(absl::StrCat("it has ", line.substr(9),
                                                        " threads (a process that does not carry itself is carried "
                                                        "by a fork, which copies one thread)"));
    }
  }
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return absl::NotFoundError(absl::StrCat("process ", pid, " is gone"));
  std::vector<int> fds;
  while (dirent* e = readdir(d)) {
    int fd = -1;
    if (absl::SimpleAtoi(e->d_name, &fd) && fd > kCarryControlFd) fds.push_back(fd);
  }
  closedir(d);
  struct stat streams[3] = {};
  for (int k = 0; k < 3; ++k) {
    if (stat(absl::StrCat(dir, "/", k).c_str(), &streams[k]) != 0) streams[k].st_ino = 0;
    if (S_ISREG(streams[k].st_mode) || S_ISDIR(streams[k].st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "its descriptor ", k, " is a file, in the files the fork freezes (only pipes and devices are carried)"));
    }
  }
  std::vector<StreamCopy> copies;
  for (int fd : fds) {
    struct stat it {};
    const std::string path = absl::StrCat(dir, "/", fd);
    int stream = 0;
    while (stream < 3 && !(stat(path.c_str(), &it) == 0 && streams[stream].st_ino != 0 &&
                           it.st_dev == streams[stream].st_dev && it.st_ino == streams[stream].st_ino)) {
      ++stream;
    }
    if (stream == 3) {
      char target[256] = {};
      (void)!readlink(path.c_str(), target, sizeof(target) - 1);
      return absl::FailedPreconditionError(
          absl::StrCat("it holds descriptor ", fd, " (", target, "), which a copy could not keep"));
    }
    std::ifstream info(absl::StrCat("/proc/", pid, "/fdinfo/", fd));
    int flags = 0;
    for (std::string line; std::getline(info, line);) {
      if (absl::StartsWith(line, "flags:")) flags = static_cast<int>(std::stol(line.substr(6), nullptr, 8));
    }
    copies.push_back({fd, stream, (flags & O_CLOEXEC) != 0});
  }
  return copies;
}

absl::StatusOr<std::unique_ptr<DrivenCarry>> DrivenCarry::Start(pid_t pid, size_t copies) {
  CORRAL_ASSIGN_OR_RETURN(std::vector<StreamCopy> streams, CheckDrivable(pid));
  std::unique_ptr<DrivenCarry> carry(new DrivenCarry());
  DrivenCarry* c = carry.get();
  c->thread_ = std::thread([c, pid, copies, streams = std::move(streams)] {
    std::vector<std::unique_ptr<Tracee>> held;  // the copies, then the process itself
    absl::Status s;
    auto own = Tracee::Seize(pid);
    if (own.ok()) {
      for (size_t i = 0; i < copies && s.ok(); ++i) {
        auto copy = (*own)->Fork();
        if (!copy.ok()) {
          s = copy.status();
          break;
        }
        s = Must(**copy, "setsid", SYS_setsid, {});  // its own session: what ends the parent's must not end it
        if (s.ok()) s = Must(**copy, "closing its descriptors", SYS_close_range, {kCarryControlFd, ~0u, 0});
        held.push_back(*std::move(copy));
      }
    } else {
      s = own.status();
    }
    const size_t made = held.size();
    if (s.ok()) held.push_back(*std::move(own));
    size_t started = 0;
    for (; s.ok() && started < held.size(); ++started) s = held[started]->Start(SYS_unshare, {0});
    if (!s.ok()) {  // no copy goes on: the gate sees them die; the process itself is let go as it was
      for (size_t i = 0; i < made; ++i) kill(held[i]->pid(), SIGKILL);
      for (size_t i = started; i < made; ++i) waitpid(held[i]->pid(), nullptr, __WALL);
    }
    c->status_ = s;
    c->announced_.Notify();
    for (size_t i = 0; i < started; ++i) {
      absl::Status carried = Steps(*held[i], i < made ? streams : std::vector<StreamCopy>{});
      if (carried.ok() || absl::IsAborted(carried)) continue;  // carried, or killed (by the gate)
      // Refused before its first step, the process itself goes on as it was; anything else half moved dies.
      if (i < made || !absl::IsCancelled(carried)) {
        spdlog::warn("carrying process {}: {}", held[i]->pid(), std::string(carried.message()));
        kill(held[i]->pid(), SIGKILL);
      }
    }
  });
  c->announced_.WaitForNotification();
  if (!c->status_.ok()) {
    absl::Status why = c->status_;
    return why;  // the destructor joins
  }
  return carry;
}

DrivenCarry::~DrivenCarry() {
  if (thread_.joinable()) thread_.join();
}

}  // namespace corral::sandbox
