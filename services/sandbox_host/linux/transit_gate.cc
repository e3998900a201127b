#include "services/sandbox_host/linux/transit_gate.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "libs/core/status_macros.h"
#include "services/sandbox_host/linux/carry_check.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox {
namespace {

constexpr int kUsernsFd = kCarryPlanFd + 1;
constexpr int kNetnsFd = kCarryPlanFd + 2;
constexpr int kMntnsFd = kCarryPlanFd + 3;

bool SameObject(int a, int b) {
  struct stat x {
  }, y{};
  return fstat(a, &x) == 0 && fstat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

bool SingleThreaded(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return line == "Threads:\t1";
  }
  return false;
}

bool RunsAs(pid_t pid, uid_t uid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  const std::string want = absl::StrCat("Uid:\t", uid, "\t", uid, "\t", uid, "\t", uid);
  while (std::getline(in, line)) {
    if (line.rfind("Uid:", 0) == 0) return line == want;
  }
  return false;
}

// A descriptor of the stopped process, as the host's own (closed with it).
UniqueFd TheirFd(int pidfd, uint64_t fd) {
  if (fd > 1u << 30) return UniqueFd();
  return UniqueFd(static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, static_cast<int>(fd), 0)));
}

struct Slot {
  bool own = false;  // the fork-ready process itself, not a copy
  CarryPlan plan;
  enum class Phase { kWaiting, kParked, kCarrying, kDone, kFailed } phase = Phase::kWaiting;
  pid_t pid = 0;
  UniqueFd pidfd;
  int listener = -1;  // parked: where its announcement waits for an answer
  uint64_t notification = 0;
  absl::Status failure;
  bool userns = false, groups = false, gid = false, uid = false, netns = false, mntns = false;
};

struct Batch {
  int watch;
  pid_t own;
  uid_t uid;                // what the copies run as when they announce themselves (their parent's uid)
  std::vector<Slot> slots;  // own's first, when there is one
};

}  // namespace

std::string CarryPlanText(const CarryPlan& plan) {
  std::string text = absl::StrCat("ids ", plan.uid, " ", plan.gid, "\n");
  if (plan.userns.valid()) absl::StrAppend(&text, "userns ", kUsernsFd, "\n");
  if (plan.netns.valid()) absl::StrAppend(&text, "netns ", kNetnsFd, "\n");
  if (plan.mntns.valid()) absl::StrAppend(&text, "mntns ", kMntnsFd, "\n");
  if (!plan.cwd.empty()) absl::StrAppend(&text, "cwd ", plan.cwd, "\n");
  if (plan.fork_ready) text += "ready\n";
  return text + "end\n";
}

struct TransitGate::State {
  absl::Mutex mu;
  std::map<int, UniqueFd> listeners ABSL_GUARDED_BY(mu);
  std::map<int, Batch> batches ABSL_GUARDED_BY(mu);
  int next_id ABSL_GUARDED_BY(mu) = 1;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  size_t refused ABSL_GUARDED_BY(mu) = 0;
  UniqueFd wake{eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
  std::thread thread;

  void Wake() { (void)!eventfd_write(wake.get(), 1); }
  bool NoneIn(int batch, Slot::Phase phase) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    for (const Slot& s : batches[batch].slots) {
      if (s.phase == phase) return false;
    }
    return true;
  }
  void Fail(Slot& s, absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    // A parked parent with no plan is refused and goes on as it was; any other process that failed its carry
    // (the parent's own included, half moved) is killed.
    const bool kill = !s.own || s.phase == Slot::Phase::kCarrying;
    if (s.phase == Slot::Phase::kParked) Refuse(s);
    if (s.pidfd.valid() && kill) syscall(SYS_pidfd_send_signal, s.pidfd.get(), SIGKILL, nullptr, 0);
    spdlog::warn("carrying process {}: {}", s.pid, std::string(why.message()));
    s.phase = Slot::Phase::kFailed;
    s.failure = std::move(why);
  }
  // Answers a parked announcement with EPERM.
  void Refuse(Slot& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    seccomp_notif_resp resp{};
    resp.id = s.notification;
    resp.error = -EPERM;
    (void)ioctl(s.listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);
    s.listener = -1;
  }
  // Installs `fd` as `number` in the process stopped in notification `id`.
  static bool Install(int listener, uint64_t id, int fd, int number) {
    seccomp_notif_addfd add{};
    add.id = id;
    add.flags = SECCOMP_ADDFD_FLAG_SETFD;
    add.srcfd = static_cast<uint32_t>(fd);
    add.newfd = static_cast<uint32_t>(number);
    return ioctl(listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add) == number;
  }
  // False: the call is answered later (parked).
  bool Answer(int listener, const seccomp_notif& req, seccomp_notif_resp& resp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  bool Park(int watch, int listener, const seccomp_notif& req) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::Status Give(Slot& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  bool Step(Slot& s, const seccomp_notif& req, seccomp_notif_resp& resp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
};

bool TransitGate::State::Park(int watch, int listener, const seccomp_notif& req) {
  const pid_t pid = static_cast<pid_t>(req.pid);
  Slot* slot = nullptr;
  for (auto& [id, batch] : batches) {
    if (batch.watch != watch) continue;
    for (Slot& s : batch.slots) {
      // A copy runs as its parent until it is carried: a process of a child (carried before, or its own) cannot
      // take the place of one.
      if (s.phase == Slot::Phase::kWaiting && (s.own ? pid == batch.own : pid != batch.own && RunsAs(pid, batch.uid))) {
        slot = &s;
        break;
      }
    }
    if (slot != nullptr) break;
  }
  if (slot == nullptr) return false;
  Slot& s = *slot;
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  // The pidfd names the caller only if the notification is still alive after it was opened.
  uint64_t id = req.id;
  if (!pidfd.valid() || ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) != 0) return false;
  if (!SingleThreaded(pid)) return false;  // refused: a copy is made by a fork, with one thread
  s.pid = pid;
  s.pidfd = std::move(pidfd);
  s.listener = listener;
  s.notification = req.id;
  s.phase = Slot::Phase::kParked;
  return true;
}

absl::Status TransitGate::State::Give(Slot& s) {
  uint64_t id = s.notification;
  if (ioctl(s.listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) != 0) {
    return absl::AbortedError("the process died while it waited for its plan");
  }
  int text[2];
  if (pipe2(text, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  UniqueFd text_r(text[0]), text_w(text[1]);
  const std::string plan_text = CarryPlanText(s.plan);  // a few hundred bytes: fits in the pipe
  bool ok = write(text_w.get(), plan_text.data(), plan_text.size()) == static_cast<ssize_t>(plan_text.size());
  text_w.Reset();
  ok = ok && Install(s.listener, id, text_r.get(), kCarryPlanFd);
  if (s.plan.userns.valid()) ok = ok && Install(s.listener, id, s.plan.userns.get(), kUsernsFd);
  if (s.plan.netns.valid()) ok = ok && Install(s.listener, id, s.plan.netns.get(), kNetnsFd);
  if (s.plan.mntns.valid()) ok = ok && Install(s.listener, id, s.plan.mntns.get(), kMntnsFd);
  if (s.plan.stdin_fd.valid()) {
    ok = ok && Install(s.listener, id, s.plan.stdin_fd.get(), 0) &&
         Install(s.listener, id, s.plan.stdout_fd.get(), 1) && Install(s.listener, id, s.plan.stderr_fd.get(), 2);
  }
  const std::string pid = absl::StrCat(s.pid);
  for (const UniqueFd& procs : s.plan.cgroup_procs) {
    ok = ok && pwrite(procs.get(), pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size());
  }
  if (!ok) return absl::InternalError(absl::StrCat("giving the carried process its plan: ", strerror(errno)));
  seccomp_notif_resp resp{};
  resp.id = id;  // the announcement returns 0
  if (ioctl(s.listener, SECCOMP_IOCTL_NOTIF_SEND, &resp) != 0) {
    return absl::AbortedError("the process died while it was given its plan");
  }
  s.listener = -1;
  s.phase = Slot::Phase::kCarrying;
  return absl::OkStatus();
}

bool TransitGate::State::Step(Slot& s, const seccomp_notif& req, seccomp_notif_resp& resp) {
  const CarryPlan& p = s.plan;
  const auto& a = req.data.args;
  // A copy becomes its child's ids before it may touch anything of the child's: until then its parent may still
  // reach it. The parent's own process keeps its ids.
  const bool switched = !p.userns.valid() || s.uid;
  auto ids = [&](uint32_t want) { return a[0] == want && a[1] == want && a[2] == want; };
  switch (req.data.nr) {
    case SYS_setns: {
      UniqueFd theirs = TheirFd(s.pidfd.get(), a[0]);
      if (!theirs.valid()) return false;
      if (a[1] == CLONE_NEWUSER && p.userns.valid() && !s.userns && SameObject(theirs.get(), p.userns.get())) {
        return s.userns = true;
      }
      if (a[1] == CLONE_NEWNET && p.netns.valid() && !s.netns && switched && SameObject(theirs.get(), p.netns.get())) {
        return s.netns = true;
      }
      if (a[1] == CLONE_NEWNS && p.mntns.valid() && !s.mntns && switched && SameObject(theirs.get(), p.mntns.get())) {
        return s.mntns = true;
      }
      return false;
    }
    case SYS_setgroups:  // in its own user namespace only, where it holds every capability
      return a[0] == 0 && s.userns && (s.groups = true);
    case SYS_setresgid: return s.groups && ids(p.gid) && (s.gid = true);
    case SYS_setresuid: return s.gid && ids(p.uid) && (s.uid = true);
    case SYS_unshare:
      if (a[0] != 0) return false;
      if (absl::Status checked = CheckCarried(s.pid, p); !checked.ok()) {
        Fail(s, std::move(checked));
        return false;
      }
      s.phase = Slot::Phase::kDone;
      resp.flags = 0;  // answered here: unshare(0) returns 0 and changes nothing
      resp.val = 0;
      return true;
    default: return false;
  }
}

bool TransitGate::State::Answer(int listener, const seccomp_notif& req, seccomp_notif_resp& resp) {
  int watch = 0;
  for (const auto& [id, fd] : listeners) {
    if (fd.get() == listener) watch = id;
  }
  const pid_t pid = static_cast<pid_t>(req.pid);
  Slot* carrying = nullptr;
  for (auto& [id, batch] : batches) {
    for (Slot& s : batch.slots) {
      if (s.phase == Slot::Phase::kCarrying && s.pid == pid) carrying = &s;
    }
  }
  if (carrying != nullptr) {
    resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    if (!SingleThreaded(pid)) {
      Fail(*carrying, absl::PermissionDeniedError("carried: it started a thread on its way"));
    } else if (Step(*carrying, req, resp)) {
      return true;
    }
  } else if (req.data.nr == SYS_unshare && req.data.args[0] == 0 && Park(watch, listener, req)) {
    return false;
  }
  resp.flags = 0;
  resp.error = -EPERM;
  ++refused;
  return true;
}

TransitGate::TransitGate() : state_(std::make_unique<State>()) {
  state_->thread = std::thread([this] { Run(); });
}

TransitGate::~TransitGate() {
  {
    absl::MutexLock lock(&state_->mu);
    state_->stopping = true;
  }
  state_->Wake();
  state_->thread.join();
}

void TransitGate::Run() {
  State& st = *state_;
  for (;;) {
    std::vector<pollfd> fds{{st.wake.get(), POLLIN, 0}};
    {
      absl::MutexLock lock(&st.mu);
      if (st.stopping) return;
      for (const auto& [id, fd] : st.listeners) fds.push_back({fd.get(), POLLIN, 0});
    }
    if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[0].revents & POLLIN) {
      eventfd_t ignored;
      (void)eventfd_read(st.wake.get(), &ignored);
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!(fds[i].revents & POLLIN)) continue;
      seccomp_notif req{};
      if (ioctl(fds[i].fd, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) continue;  // the caller died meanwhile
      seccomp_notif_resp resp{};
      resp.id = req.id;
      bool answer;
      {
        absl::MutexLock lock(&st.mu);
        answer = st.Answer(fds[i].fd, req, resp);
      }
      if (answer) (void)ioctl(fds[i].fd, SECCOMP_IOCTL_NOTIF_SEND, &resp);
    }
    // A listener whose processes are all gone hangs up; it stays until Unwatch, out of the poll set.
    for (size_t i = 1; i < fds.size(); ++i) {
      if ((fds[i].revents & (POLLHUP | POLLERR)) && !(fds[i].revents & POLLIN)) {
        absl::MutexLock lock(&st.mu);
        for (auto it = st.listeners.begin(); it != st.listeners.end(); ++it) {
          if (it->second.get() == fds[i].fd) {
            st.listeners.erase(it);
            break;
          }
        }
      }
    }
  }
}

int TransitGate::Watch(UniqueFd listener) {
  int id;
  {
    absl::MutexLock lock(&state_->mu);
    id = state_->next_id++;
    state_->listeners.emplace(id, std::move(listener));
  }
  state_->Wake();
  return id;
}

void TransitGate::Unwatch(int watch) {
  {
    absl::MutexLock lock(&state_->mu);
    state_->listeners.erase(watch);
  }
  state_->Wake();
}

int TransitGate::Expect(int watch, size_t copies, pid_t own, uid_t uid) {
  Batch batch{watch, own, uid, {}};
  if (own > 0) batch.slots.emplace_back().own = true;
  for (size_t i = 0; i < copies; ++i) batch.slots.emplace_back();
  absl::MutexLock lock(&state_->mu);
  const int id = state_->next_id++;
  state_->batches.emplace(id, std::move(batch));
  return id;
}

absl::StatusOr<std::vector<pid_t>> TransitGate::AwaitParked(int batch, absl::Duration timeout) {
  State& st = *state_;
  absl::MutexLock lock(&st.mu);
  auto parked = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(st.mu) { return st.NoneIn(batch, Slot::Phase::kWaiting); };
  st.mu.AwaitWithTimeout(absl::Condition(&parked), timeout);
  std::vector<pid_t> out;
  bool own_missing = false;
  for (const Slot& s : st.batches[batch].slots) {
    own_missing = own_missing || (s.own && s.phase == Slot::Phase::kWaiting);
    if (!s.own && s.phase == Slot::Phase::kParked) out.push_back(s.pid);
  }
  if (own_missing) return absl::DeadlineExceededError("the process did not answer the fork in time");
  const size_t copies = st.batches[batch].slots.size() - (st.batches[batch].own > 0 ? 1 : 0);
  if (out.size() != copies) {
    return absl::DeadlineExceededError(
        absl::StrCat("the process made ", out.size(), " of its ", copies, " copies in time"));
  }
  return out;
}

absl::Status TransitGate::Release(int batch, std::optional<CarryPlan> own_plan, std::vector<CarryPlan> copy_plans) {
  auto readable = [](const CarryPlan& p) {
    const bool streams = p.stdin_fd.valid();
    if (streams != p.stdout_fd.valid() || streams != p.stderr_fd.valid()) {
      return absl::InvalidArgumentError("a carry's standard streams come all three or not at all");
    }
    if (p.cwd.find('\n') != std::string::npos) return absl::InvalidArgumentError("a carry's cwd has a newline");
    return absl::OkStatus();
  };
  if (own_plan) CORRAL_RETURN_IF_ERROR(readable(*own_plan));
  for (const CarryPlan& p : copy_plans) CORRAL_RETURN_IF_ERROR(readable(p));
  State& st = *state_;
  absl::MutexLock lock(&st.mu);
  size_t next = 0;
  for (Slot& s : st.batches[batch].slots) {
    if (s.own && own_plan) {
      s.plan = *std::move(own_plan);
      own_plan.reset();
    } else if (!s.own && next < copy_plans.size()) {
      s.plan = std::move(copy_plans[next++]);
    } else {
      if (s.phase == Slot::Phase::kParked) st.Fail(s, absl::CancelledError("no plan was made for it"));
      continue;
    }
    if (s.phase != Slot::Phase::kParked) continue;
    if (absl::Status given = st.Give(s); !given.ok()) st.Fail(s, std::move(given));
  }
  return absl::OkStatus();
}

std::vector<absl::StatusOr<pid_t>> TransitGate::Await(int batch, absl::Duration timeout) {
  State& st = *state_;
  absl::MutexLock lock(&st.mu);
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(st.mu) { return st.NoneIn(batch, Slot::Phase::kCarrying); };
  st.mu.AwaitWithTimeout(absl::Condition(&settled), timeout);
  std::vector<absl::StatusOr<pid_t>> out;
  for (Slot& s : st.batches[batch].slots) {
    switch (s.phase) {
      case Slot::Phase::kWaiting:
        out.push_back(absl::DeadlineExceededError("no process announced itself for this carry"));
        break;
      case Slot::Phase::kParked:
        st.Fail(s, absl::CancelledError("the carry was given up before it began"));
        out.push_back(s.failure);
        break;
      case Slot::Phase::kCarrying:
        st.Fail(s, absl::DeadlineExceededError("the carried process did not finish its steps in time"));
        out.push_back(s.failure);
        break;
      case Slot::Phase::kFailed: out.push_back(s.failure); break;
      case Slot::Phase::kDone: out.push_back(s.pid); break;
    }
  }
  st.batches.erase(batch);
  return out;
}

size_t TransitGate::refused() const {
  absl::MutexLock lock(&state_->mu);
  return state_->refused;
}

}  // namespace corral::sandbox
