#include "services/sandbox_host/exec/exec_manager.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "libs/core/status_macros.h"
#include "services/sandbox_host/linux/process_sweep.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox {
namespace {

constexpr absl::Duration kDrainAfterExit = absl::Milliseconds(200);  // background children may hold the pipes
constexpr absl::Duration kReapEvery = absl::Seconds(1);

// Epoll tags: the execution's key and which of its descriptors; 0 is the wake-up eventfd.
uint64_t Tag(uint64_t key, Stream stream) { return key << 2 | static_cast<uint64_t>(stream); }

}  // namespace

ExecManager::ExecManager(Clock* clock, SandboxHostMetrics* metrics, WorkerPool* workers, Carrier* carrier)
    : clock_(clock), metrics_(metrics), workers_(workers), carrier_(carrier) {
  epoll_.Reset(epoll_create1(EPOLL_CLOEXEC));
  wake_.Reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  epoll_event ev{EPOLLIN, {.u64 = 0}};
  if (!epoll_.valid() || !wake_.valid() || epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0) {
    // Nothing could be watched: every Start fails (Watch reports it), rather than processes going unnoticed.
    spdlog::error("exec manager: cannot set up epoll: {}", strerror(errno));
  }
  thread_ = std::thread([this] { Loop(); });
}

ExecManager::~ExecManager() {
  std::vector<std::shared_ptr<Execution>> all;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, e] : executions_) all.push_back(e);
  }
  for (auto& e : all) {
    clock_->Cancel(e->timeout_timer);
    e->Kill(ExitReason::kKilled);
  }
  uint64_t one = 1;
  ssize_t ignored = write(wake_.get(), &one, sizeof(one));
  (void)ignored;
  thread_.join();
}

size_t ExecManager::running() const {
  absl::MutexLock lock(&mu_);
  return executions_.size();
}

bool ExecManager::Watch(uint64_t key, Stream stream, int fd, uint32_t events) {
  epoll_event ev{events, {.u64 = Tag(key, stream)}};
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) == 0) return true;
  spdlog::error("exec manager: cannot watch descriptor {} of process p-{}: {}", fd, key, strerror(errno));
  return false;
}

void ExecManager::Unwatch(int fd) {
  if (fd >= 0) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
}

absl::StatusOr<std::shared_ptr<Execution>> ExecManager::Start(std::shared_ptr<const Sandbox> sandbox,
                                                              ExecOptions options) {
  if (options.argv.empty() || options.argv[0].empty()) return absl::InvalidArgumentError("argv must not be empty");
  for (const auto& [k, v] : options.env) {
    if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos ||
        v.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("env name '", k, "' is invalid"));
    }
    if (IsHostSetEnv(k)) return absl::InvalidArgumentError(absl::StrCat("env ", k, " is set by the host"));
  }
  if (sandbox->paused) {
    return absl::FailedPreconditionError(
        absl::StrCat("sandbox '", sandbox->id, "' is paused: resume it before running commands"));
  }
  uint64_t key = 0;
  {
    absl::MutexLock lock(&mu_);
    key = next_key_++;
  }
  std::map<std::string, std::string> env = options.env;
  env[kProcessIdVar] = ProcessIdOf(key);  // what tells this process's escapees from the sandbox's others
  SpawnSpec spec = sandbox->SpawnFor(options.argv, env, options.cwd, options.user);
  spec.pipe_stdin = true;
  if (options.fork_ready && carrier_ == nullptr) {
    return absl::FailedPreconditionError("this host cannot carry processes into forks (no user namespaces for it)");
  }
  if (options.fork_ready && sandbox->in_image()) {
    return absl::FailedPreconditionError("a fork-ready process runs in a sandbox on the host's filesystem only");
  }
  absl::StatusOr<Spawned> spawned;
  {
    // Not beside a teardown: its sweep would miss a process spawned meanwhile (root until it takes the uid),
    // which would then run as the uid of a deleted sandbox, in the cgroup the teardown could not remove.
    absl::MutexLock uid_lock(&sandbox->uid_mu);
    if (sandbox->deleted) return absl::NotFoundError(absl::StrCat("sandbox '", sandbox->id, "' was deleted"));
    spawned = options.fork_ready ? SpawnForkReady(sandbox, std::move(spec), options, key) : Spawn(spec);
  }
  if (!spawned.ok()) return spawned.status();
  return Track(std::move(sandbox), key, *std::move(spawned), std::move(options));
}

absl::StatusOr<Spawned> ExecManager::SpawnForkReady(const std::shared_ptr<const Sandbox>& sandbox, SpawnSpec spec,
                                                    const ExecOptions& options, uint64_t key) {
  int control[2];
  if (pipe2(control, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  UniqueFd control_r(control[0]);
  auto control_w = std::make_shared<UniqueFd>(control[1]);
  CORRAL_ASSIGN_OR_RETURN(std::shared_ptr<const CarryView> view, carrier_->ViewFor(*sandbox));
  spec.mountns_fd = view->mnt.get();
  spec.landlock_fd = view->landlock.valid() ? view->landlock.get() : -1;
  spec.family_userns_fd = carrier_->family_fd();
  spec.control_fd = control_r.get();
  spec.env.push_back(absl::StrCat("CORRAL_CARRY_SIGNAL=", SIGRTMIN));
  // corral_carry on its Python path, after the command's own entries.
  auto path = std::find_if(spec.env.begin(), spec.env.end(),
                           [](const std::string& kv) { return absl::StartsWith(kv, "PYTHONPATH="); });
  if (path != spec.env.end()) {
    absl::StrAppend(&*path, ":", carrier_->lib_dir());
  } else {
    spec.env.push_back("PYTHONPATH=" + carrier_->lib_dir());
  }
  CORRAL_ASSIGN_OR_RETURN(Spawned spawned, Spawn(spec));
  ForkReadyProcess ready{.pid = spawned.pid,
                         .process_id = ProcessIdOf(key),
                         .argv = options.argv,
                         .kind = static_cast<int>(options.kind),
                         .output_path = options.output_path,
                         .watch = carrier_->gate().Watch(std::move(spawned.gate)),
                         .control = std::move(control_w),
                         .generation = sandbox.get()};
  absl::MutexLock lock(&sandbox->fork_ready->mu);
  sandbox->fork_ready->processes.push_back(std::move(ready));
  return spawned;
}

absl::StatusOr<std::shared_ptr<Execution>> ExecManager::Adopt(std::shared_ptr<const Sandbox> sandbox, Spawned process,
                                                              ExecOptions options) {
  uint64_t key = 0;
  {
    absl::MutexLock lock(&mu_);
    key = next_key_++;
  }
  options.fork_ready = false;
  options.stdin_data.clear();
  CORRAL_ASSIGN_OR_RETURN(std::shared_ptr<Execution> e,
                          Track(std::move(sandbox), key, std::move(process), std::move(options)));
  e->unread = true;
  return e;
}

absl::StatusOr<std::shared_ptr<Execution>> ExecManager::TakeUp(const std::string& sandbox_id,
                                                               const std::string& process_id) {
  absl::MutexLock lock(&mu_);
  for (const auto& [key, e] : executions_) {
    if (e->id() != process_id || e->sandbox()->id != sandbox_id) continue;
    if (!e->unread.exchange(false)) {
      return absl::FailedPreconditionError(absl::StrCat("process ", process_id, " already has a reader"));
    }
    return e;
  }
  return absl::NotFoundError(absl::StrCat("no running process ", process_id, " in sandbox '", sandbox_id, "'"));
}

absl::StatusOr<std::shared_ptr<Execution>> ExecManager::Track(std::shared_ptr<const Sandbox> sandbox, uint64_t key,
                                                              Spawned spawned, ExecOptions options) {
  sandbox->ProcessStarted(clock_->Now());  // a running process keeps the sandbox from idle eviction
  const absl::Duration timeout = options.timeout;
  std::shared_ptr<Execution> e;
  {
    absl::MutexLock lock(&mu_);
    e = std::make_shared<Execution>(this, key, spawned.pid, sandbox, std::move(options), clock_->Now());
    executions_.emplace(key, e);  // before its descriptors are watched: their events find it
  }
  if (absl::Status attached = e->Attach(std::move(spawned)); !attached.ok()) {
    sandbox->ProcessEnded(clock_->Now());
    absl::MutexLock lock(&mu_);
    executions_.erase(e->key());
    return attached;
  }
  if (timeout > absl::ZeroDuration()) {
    std::weak_ptr<Execution> weak = e;
    // The kill sweep can take seconds: on a worker, not on the clock's thread that runs every other timer.
    e->timeout_timer = clock_->RunAfter(timeout, [weak, workers = workers_] {
      RunOn(workers, [weak] {
        if (auto strong = weak.lock()) strong->Kill(ExitReason::kTimedOut);
      });
    });
  }
  return e;
}

void ExecManager::Loop() {
  // Stdin writes to a process that closed its end must fail with EPIPE here, not kill the host.
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, nullptr);
  epoll_event events[64];
  absl::Time next_reap = clock_->Now();
  while (true) {
    const int n = epoll_wait(epoll_.get(), events, 64, static_cast<int>(absl::ToInt64Milliseconds(kReapEvery)));
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == 0) return;  // woken to stop
      std::shared_ptr<Execution> e = Find(tag >> 2);
      if (e == nullptr) continue;
      switch (static_cast<Stream>(tag & 3)) {
        case Stream::kExit: OnProcessExit(e); break;
        case Stream::kStdin: e->OnWritable(); break;
        case Stream::kStdout: e->OnReadable(Stream::kStdout); break;
        case Stream::kStderr: e->OnReadable(Stream::kStderr); break;
      }
      // Exited with its output read to the end: it lets go of its sandbox now, not after the drain's grace
      // (a fork waits for every call on the sandbox to let go).
      if (e->finished()) {
        absl::MutexLock lock(&mu_);
        executions_.erase(e->key());
      }
    }
    if (clock_->Now() >= next_reap) {
      ReapUntracked();
      {
        absl::MutexLock lock(&mu_);
        PruneHistory();
      }
      next_reap = clock_->Now() + kReapEvery;
    }
  }
}

std::shared_ptr<Execution> ExecManager::Find(uint64_t key) {
  absl::MutexLock lock(&mu_);
  auto it = executions_.find(key);
  return it == executions_.end() ? nullptr : it->second;
}

void ExecManager::OnProcessExit(const std::shared_ptr<Execution>& e) {
  clock_->Cancel(e->timeout_timer);
  if (carrier_ != nullptr) {  // a fork-ready process: no fork asks it for copies any more
    ForkReadyList& ready = *e->sandbox()->fork_ready;
    absl::MutexLock lock(&ready.mu);
    for (auto it = ready.processes.begin(); it != ready.processes.end(); ++it) {
      if (it->process_id == e->id()) {
        carrier_->gate().Unwatch(it->watch);
        ready.processes.erase(it);
        break;
      }
    }
  }
  const ExitInfo exit = e->OnExited(clock_->Now());
  e->sandbox()->Touch(clock_->Now());
  e->sandbox()->ProcessEnded(clock_->Now());
  if (metrics_) metrics_->Exec(ExitReasonName(exit.reason)).Observe(absl::ToDoubleSeconds(exit.duration));
  {
    absl::MutexLock lock(&mu_);
    History& h = history_[e->sandbox()->id];
    h.sandbox = e->sandbox();
    h.exited.push_back(e->Info());
    if (h.exited.size() > kMaxExitedKept) h.exited.pop_front();
  }
  e->Notify();
  // Output still in the pipes comes through; a background child holding them open gets a short grace.
  std::weak_ptr<Execution> weak = e;
  clock_->RunAfter(kDrainAfterExit, [this, weak, key = e->key()] {
    if (auto strong = weak.lock()) strong->CloseOutputs();
    absl::MutexLock lock(&mu_);
    executions_.erase(key);
  });
}

std::vector<ProcessInfo> ExecManager::List(const std::string& sandbox_id, bool include_exited) const {
  std::vector<ProcessInfo> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, e] : executions_) {
    if (e->sandbox()->id != sandbox_id) continue;
    ProcessInfo info = e->Info();
    if (!info.exit) out.push_back(std::move(info));  // exited ones come from the history
  }
  if (auto it = history_.find(sandbox_id); include_exited && it != history_.end()) {
    out.insert(out.end(), it->second.exited.begin(), it->second.exited.end());
  }
  std::sort(out.begin(), out.end(), [](const ProcessInfo& a, const ProcessInfo& b) {
    return std::pair(a.start_time, a.pid) < std::pair(b.start_time, b.pid);
  });
  return out;
}

absl::StatusOr<ProcessInfo> ExecManager::Signal(const std::string& sandbox_id, const std::string& process_id, int sig) {
  std::shared_ptr<Execution> target;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, e] : executions_) {
      if (e->sandbox()->id == sandbox_id && e->id() == process_id) target = e;
    }
    if (target == nullptr) {
      if (auto it = history_.find(sandbox_id); it != history_.end()) {
        for (const ProcessInfo& p : it->second.exited) {
          if (p.id == process_id) return p;  // already exited: unchanged
        }
      }
      return absl::NotFoundError(absl::StrCat("process '", process_id, "' not found in sandbox '", sandbox_id, "'"));
    }
  }
  target->Signal(sig);
  if (sig == SIGKILL) target->WaitExited(absl::Seconds(2));  // the sweep is done; the exit follows at once
  return target->Info();
}

void ExecManager::PruneHistory() {
  absl::erase_if(history_, [](const auto& entry) {
    auto sandbox = entry.second.sandbox.lock();
    return sandbox == nullptr || sandbox->deleted;
  });
}

void ExecManager::ReapUntracked() {
  absl::flat_hash_set<pid_t> tracked;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, e] : executions_) tracked.insert(e->pid());
  }
  ReapOrphans(tracked);
}

}  // namespace corral::sandbox
