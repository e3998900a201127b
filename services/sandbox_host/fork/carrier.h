// What lets a sandbox's running processes be carried into its fork's children (linux/fork_gate.h and
// linux/transit_gate.h have the mechanism): the host's family user namespace, which fork-ready processes live
// in, and the gate that answers their gated calls. One per host.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "libs/core/unique_fd.h"
#include "services/sandbox_host/linux/transit_gate.h"
#include "services/sandbox_host/sandbox.h"

namespace corral::sandbox {

// A fork's child: a copy of one of the parent's fork-ready processes, carried into it (ExecManager::Adopt
// watches it).
struct CarriedProcess {
  Spawned process;  // its pid, and the host's ends of its standard streams
  std::vector<std::string> argv;
  int kind = 0;  // as the parent's (ForkReadyProcess)
  std::string output_path;
  std::string copy_of;  // the parent's process ("p-7")
};

class Carrier {
 public:
  // FAILED_PRECONDITION where the kernel cannot (no user namespaces for the host). `views_dir`: where the
  // fork-ready processes' roots are assembled (emptied now). `lib_dir`: where corral_carry.py is, read-only in
  // their view and on their PYTHONPATH.
  static absl::StatusOr<std::unique_ptr<Carrier>> Create(const std::string& views_dir, const std::string& lib_dir);

  const std::string& lib_dir() const { return lib_dir_; }

  int family_fd() const { return family_.get(); }
  TransitGate& gate() { return gate_; }
  // The view and Landlock rules of `sb`'s fork-ready processes (linux/carry_root.h), made at its first one.
  // FAILED_PRECONDITION for a sandbox without a mount namespace, or in an image.
  absl::StatusOr<std::shared_ptr<const CarryView>> ViewFor(const Sandbox& sb);

 private:
  Carrier(UniqueFd family, std::string views_dir, std::string lib_dir)
      : family_(std::move(family)), views_dir_(std::move(views_dir)), lib_dir_(std::move(lib_dir)) {}
  UniqueFd family_;
  const std::string views_dir_, lib_dir_;
  std::atomic<uint64_t> next_view_{0};
  TransitGate gate_;
};

}  // namespace corral::sandbox
