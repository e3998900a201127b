// Carrying a parent's fork-ready processes through its fork (fork/carrier.h has the mechanism): each is asked
// for one copy per child and parks in the gate with them while the files are frozen; then each copy is carried
// into its child (the child's uid, user and network namespaces, cgroup, files mounted where the parent's were,
// its own streams) and each process itself into the parent's next generation.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "libs/core/status_macros.h"
#include "services/sandbox_host/linux/driven_carry.h"
#include "services/sandbox_host/linux/fork_gate.h"
#include "services/sandbox_host/linux/process_sweep.h"
#include "services/sandbox_host/sandbox_manager.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox {
namespace {

constexpr absl::Duration kAnswerAtLeast = absl::Seconds(5);  // a process busy in C code answers between bytecodes
constexpr absl::Duration kCarryTime = absl::Seconds(10);

// Whether `pid` answers the carry's signal itself (corral_carry.ready()): it catches SIGRTMIN.
bool CarriesItself(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(status, line);) {
    uint64_t caught = 0;
    if (absl::StartsWith(line, "SigCgt:") && absl::SimpleHexAtoi(line.substr(7), &caught)) {
      return (caught >> (SIGRTMIN - 1)) & 1;
    }
  }
  return false;
}

// Where the carried processes' files are, as the parent's processes see them: its home, /tmp, its task paths.
std::vector<std::string> MountPoints(const Sandbox& sb) {
  std::vector<std::string> points{sb.home, "/tmp"};
  for (const std::string& p : sb.spec.task_paths) points.push_back(p);
  return points;
}

// fn(0) … fn(n - 1), on two threads: a child's steps wait on the kernel (clones, namespaces, mounts) more than they
// compute.
void ForEachChild(size_t n, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  auto run = [&] {
    for (size_t i = next++; i < n; i = next++) fn(i);
  };
  std::thread other(run);
  run();
  other.join();
}

// A carried process's view: `base_mnt` (the namespace it is in) with `sb`'s places over its old ones, in a mount
// namespace owned by `userns_fd` (where the process can join it).
absl::Status GiveView(CarryPlan& plan, const Sandbox& sb, int base_mnt, int userns_fd,
                      const std::vector<std::string>& points) {
  CORRAL_ASSIGN_OR_RETURN(std::vector<UniqueFd> trees, CloneTreesIn(sb.namespaces.mnt.get(), MountPoints(sb)));
  std::vector<int> fds;
  for (const UniqueFd& t : trees) fds.push_back(t.get());
  CORRAL_ASSIGN_OR_RETURN(plan.mntns, CarryMountNamespace(base_mnt, userns_fd, fds, points));
  for (size_t i = 0; i < trees.size(); ++i) plan.mounts.push_back({std::move(trees[i]), points[i]});
  return absl::OkStatus();
}

// Where a carried process works afterwards: where it was, when that is among its files; else its home.
std::string WorkingDirectory(pid_t pid, const std::vector<std::string>& points) {
  char buf[4096];
  const ssize_t n = readlink(absl::StrCat("/proc/", pid, "/cwd").c_str(), buf, sizeof(buf) - 1);
  const std::string cwd = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  if (cwd.find('\n') != std::string::npos) return points[0];
  for (const std::string& p : points) {
    if (cwd == p || absl::StartsWith(cwd, p + "/")) return cwd;
  }
  return points[0];
}

// What a child gives its carried copies: its ids in a user namespace of its own (nested in the family's), a
// network namespace it may join (the child's own, for network policy none, now owned by that namespace).
struct ChildIdentity {
  UniqueFd userns;
  UniqueFd netns;
};

absl::StatusOr<ChildIdentity> IdentityOf(Carrier& carrier, Sandbox& child) {
  ChildIdentity id;
  CORRAL_ASSIGN_OR_RETURN(id.userns, CreateCopyUserNamespace(carrier.family_fd(), child.uid, child.uid));
  if (child.namespaces.net.valid()) {
    CORRAL_ASSIGN_OR_RETURN(id.netns, CreateCopyNetworkNamespace(id.userns.get()));
    child.namespaces.net.Reset(dup(id.netns.get()));  // nothing runs in it yet: its processes join this one
  }
  return id;
}

absl::StatusOr<CarryPlan> CopyPlan(const Sandbox& parent, const Sandbox& child, const ChildIdentity& id, int base_mnt,
                                   const std::string& cwd, SandboxManager::CarriedProcess& ours) {
  CarryPlan plan;
  plan.uid = plan.gid = child.uid;
  plan.userns.Reset(dup(id.userns.get()));
  if (id.netns.valid()) plan.netns.Reset(dup(id.netns.get()));
  CORRAL_RETURN_IF_ERROR(GiveView(plan, child, base_mnt, id.userns.get(), MountPoints(parent)));
  plan.cwd = cwd;
  for (int fd : child.cgroup.procs_fds()) plan.cgroup_procs.emplace_back(dup(fd));
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  plan.stdin_fd.Reset(in[0]);
  plan.stdout_fd.Reset(out[1]);
  plan.stderr_fd.Reset(err[1]);
  ours.process.stdin_fd.Reset(in[1]);
  ours.process.stdout_fd.Reset(out[0]);
  ours.process.stderr_fd.Reset(err[0]);
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  return plan;
}

}  // namespace

absl::StatusOr<std::vector<SandboxManager::Carry>> SandboxManager::ParkForkReady(const std::shared_ptr<Sandbox>& parent,
                                                                                 int64_t count, absl::Duration wait) {
  std::vector<Carry> carries;
  {
    absl::MutexLock lock(&parent->fork_ready->mu);
    for (const ForkReadyProcess& p : parent->fork_ready->processes) carries.push_back({p, 0, {}});
  }
  if (carries.empty()) return carries;
  TransitGate& gate = carrier_->gate();
  const std::string ask = absl::StrCat("fork ", count, "\n");
  absl::Status failed;
  for (Carry& c : carries) {
    c.batch = gate.Expect(c.process.watch, static_cast<size_t>(count), c.process.pid, parent->uid);
    if (!CarriesItself(c.process.pid)) {
      auto driven = DrivenCarry::Start(c.process.pid, static_cast<size_t>(count));
      if (driven.ok()) {
        c.driven = *std::move(driven);
        continue;
      }
      failed = absl::FailedPreconditionError(absl::StrCat("sandbox '", parent->id, "': its fork-ready process ",
                                                          c.process.process_id,
                                                          " cannot be carried: ", driven.status().message()));
      break;
    }
    if (write(c.process.control->get(), ask.data(), ask.size()) != static_cast<ssize_t>(ask.size()) ||
        kill(c.process.pid, SIGRTMIN) != 0) {
      spdlog::warn("sandbox {}: process {} could not be asked for copies: {}", parent->id, c.process.process_id,
                   strerror(errno));
    }
  }
  const absl::Time deadline = clock_->Now() + std::max(wait, kAnswerAtLeast);
  absl::flat_hash_set<pid_t> parked;
  for (Carry& c : carries) {
    if (!failed.ok()) break;
    auto copies = gate.AwaitParked(c.batch, std::max(deadline - clock_->Now(), absl::ZeroDuration()));
    if (!copies.ok()) {
      failed = absl::FailedPreconditionError(absl::StrCat("sandbox '", parent->id, "': its fork-ready process ",
                                                          c.process.process_id,
                                                          " could not be forked: ", copies.status().message()));
      break;
    }
    c.copies = *std::move(copies);
    parked.insert(c.process.pid);
    parked.insert(c.copies.begin(), c.copies.end());
  }
  if (failed.ok()) {
    // Nothing else of the parent may run while its files are frozen (a copy's own parent has just exited).
    for (const absl::Time until = clock_->Now() + absl::Seconds(1);;) {
      size_t others = 0;
      for (pid_t pid : ProcessesOf(parent->uid)) others += parked.contains(pid) ? 0 : 1;
      if (others == 0) break;
      if (clock_->Now() > until) {
        failed = absl::FailedPreconditionError(
            absl::StrCat("sandbox '", parent->id, "' has ", others,
                         " process(es) besides its fork-ready ones and their copies: a fork cannot carry them"));
        break;
      }
      parent->delete_requested.SleepFor(*clock_, absl::Milliseconds(2));
    }
  }
  if (!failed.ok()) {
    GiveUp(carries);
    return failed;
  }
  return carries;
}

std::shared_ptr<Sandbox> SandboxManager::CarryAfterFreeze(
    std::vector<Carry>& carries, const std::shared_ptr<Sandbox>& parent,
    absl::StatusOr<std::vector<std::shared_ptr<Sandbox>>>& children, std::vector<std::vector<CarriedProcess>>& carried,
    CreateResult& result) {
  // The parent's next generation is built now rather than at its next use: its processes need their files now.
  // It keeps the parent's network namespace, where the processes' listeners are.
  std::shared_ptr<Sandbox> next;
  if (!carries.empty() && children.ok() && parent->renewal_due) {
    auto built = NextGeneration(parent);
    if (built.ok()) {
      next = *std::move(built);
      if (parent->namespaces.net.valid()) next->namespaces.net.Reset(dup(parent->namespaces.net.get()));
    } else {
      children = built.status();
    }
  }
  if (!carries.empty() && children.ok()) {
    CarryInto(carries, *parent, next.get(), *children, carried, result);
  } else {
    GiveUp(carries);
  }
  return next;
}

void SandboxManager::GiveUp(std::vector<Carry>& carries) {
  for (Carry& c : carries) {
    (void)carrier_->gate().Release(c.batch, std::nullopt, {});
    (void)carrier_->gate().Await(c.batch, absl::ZeroDuration());
    c.driven.reset();
  }
  carries.clear();
}

void SandboxManager::CarryInto(std::vector<Carry>& carries, const Sandbox& parent, const Sandbox* next,
                               const std::vector<std::shared_ptr<Sandbox>>& children,
                               std::vector<std::vector<CarriedProcess>>& carried, CreateResult& result) {
  const absl::Time start_all = clock_->Now();
  carried.clear();
  carried.resize(children.size());
  std::vector<absl::StatusOr<ChildIdentity>> made;
  for (size_t k = 0; k < children.size(); ++k) made.emplace_back(absl::UnknownError("not made"));
  ForEachChild(children.size(), [&](size_t k) { made[k] = IdentityOf(*carrier_, *children[k]); });
  std::vector<std::optional<ChildIdentity>> ids(children.size());
  for (size_t k = 0; k < children.size(); ++k) {
    if (made[k].ok()) {
      ids[k] = *std::move(made[k]);
    } else {
      result.not_carried.push_back(absl::StrCat("into ", children[k]->id, ": ", made[k].status().message()));
    }
  }
  const absl::Time identities_made = clock_->Now();
  absl::Duration planning, carrying;
  for (Carry& c : carries) {
    const absl::Time start = clock_->Now();
    const std::string cwd = WorkingDirectory(c.process.pid, MountPoints(parent));
    UniqueFd base_mnt(open(absl::StrCat("/proc/", c.process.pid, "/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC));
    CarryPlan own;
    own.uid = own.gid = parent.uid;
    own.fork_ready = true;
    own.control.Reset(dup(c.process.control->get()));
    own.cwd = cwd;
    absl::Status viewed = base_mnt.valid() ? absl::OkStatus() : absl::InternalError("its mount namespace is gone");
    if (viewed.ok() && next != nullptr) {
      viewed = GiveView(own, *next, base_mnt.get(), carrier_->family_fd(), MountPoints(parent));
    }
    if (!viewed.ok()) {
      result.not_carried.push_back(absl::StrCat(c.process.process_id, ": ", viewed.message()));
      (void)carrier_->gate().Release(c.batch, std::nullopt, {});
      (void)carrier_->gate().Await(c.batch, absl::ZeroDuration());
      c.driven.reset();
      continue;
    }
    const size_t n = std::min(children.size(), c.copies.size());
    std::vector<CarriedProcess> mine(n);
    std::vector<absl::StatusOr<CarryPlan>> planned_for;
    for (size_t k = 0; k < n; ++k) planned_for.emplace_back(absl::UnknownError("not planned"));
    ForEachChild(n, [&](size_t k) {
      mine[k] = CarriedProcess{.argv = c.process.argv,
                               .kind = c.process.kind,
                               .output_path = c.process.output_path,
                               .copy_of = c.process.process_id};
      planned_for[k] = ids[k] ? CopyPlan(parent, *children[k], *ids[k], base_mnt.get(), cwd, mine[k])
                              : absl::FailedPreconditionError("the child has no identity for it");
    });
    std::vector<CarryPlan> plans;
    std::vector<CarriedProcess> ours;
    for (size_t k = 0; k < n; ++k) {
      absl::StatusOr<CarryPlan>& plan = planned_for[k];
      if (!plan.ok()) {
        // The copies are given in order: one that cannot go to its child goes nowhere, and the rest after it.
        result.not_carried.push_back(
            absl::StrCat(c.process.process_id, " into ", children[k]->id, ": ", plan.status().message()));
        break;
      }
      plans.push_back(*std::move(plan));
      ours.push_back(std::move(mine[k]));
    }
    if (absl::Status s = carrier_->gate().Release(c.batch, std::move(own), std::move(plans)); !s.ok()) {
      result.not_carried.push_back(absl::StrCat(c.process.process_id, ": ", s.message()));
      (void)carrier_->gate().Await(c.batch, absl::ZeroDuration());
      c.driven.reset();
      continue;
    }
    const absl::Time planned = clock_->Now();
    std::vector<absl::StatusOr<pid_t>> outcome = carrier_->gate().Await(c.batch, kCarryTime);
    c.driven.reset();  // once it let them go
    planning += planned - start;
    carrying += clock_->Now() - planned;
    if (!outcome[0].ok()) {
      result.not_carried.push_back(absl::StrCat(c.process.process_id, ": ", outcome[0].status().message()));
    }
    for (size_t k = 0; k < ours.size(); ++k) {
      const absl::StatusOr<pid_t>& copy = outcome[k + 1];
      if (!copy.ok()) {
        result.not_carried.push_back(
            absl::StrCat(c.process.process_id, " into ", children[k]->id, ": ", copy.status().message()));
        continue;
      }
      ours[k].process.pid = *copy;
      carried[k].push_back(std::move(ours[k]));
    }
  }
  spdlog::info("sandbox {}: carried {} process(es) into {} children: identities {}, plans {}, the carries {}",
               parent.id, carries.size(), children.size(), absl::FormatDuration(identities_made - start_all),
               absl::FormatDuration(planning), absl::FormatDuration(carrying));
}

}  // namespace corral::sandbox
