// SandboxManager's forks (ForkSandbox): a layered home, and the fork itself (fork_layers.h has the layer model).
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "libs/api/ids.h"
#include "libs/core/logging.h"
#include "libs/core/status_macros.h"
#include "services/sandbox_host/images/image_root.h"
#include "services/sandbox_host/images/image_store.h"
#include "services/sandbox_host/linux/process_sweep.h"
#include "services/sandbox_host/sandbox_manager.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox {

namespace fs = std::filesystem;

absl::Status SandboxManager::BuildLayeredHome(Sandbox& sb, const Layering& layering) {
  const std::string rw = sb.dir + "/rw", staging = sb.dir + "/layers";
  if (layering.parent == nullptr) {  // a child: its own directory, upper layer and an empty /tmp
    if (mkdir(sb.dir.c_str(), 0700) != 0) {
      return absl::InternalError(absl::StrCat("cannot create ", sb.dir, ": ", strerror(errno)));
    }
    CORRAL_RETURN_IF_ERROR(MakeUpper(rw, sb.uid));
    // An opaque directory hides the layers' .tmp: the parent's temporary files are not inherited.
    const std::string tmp = rw + "/upper/.tmp";
    if (mkdir(tmp.c_str(), 0700) != 0 || chown(tmp.c_str(), sb.uid, sb.uid) != 0 ||
        setxattr(tmp.c_str(), "trusted.overlay.opaque", "y", 1, 0) != 0) {
      return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", strerror(errno)));
    }
  }  // the parent: the freeze left an empty upper layer in its directory
  if (mkdir(staging.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot create ", staging, ": ", strerror(errno)));
  }
  LayeredHome home;
  home.upper = rw + "/upper";
  home.work = rw + "/work";
  home.staging = staging;
  CORRAL_ASSIGN_OR_RETURN(auto userns, LayerUserNamespaces(layering.layers, sb.uid));
  for (const ForkLayer* layer : LayersOf(layering.layers)) {
    home.layers.push_back({layer->dir, layer->owner != sb.uid ? userns.at(layer->owner).get() : -1});
  }
  auto ns = CreateNamespaces(sb.home, sb.spec.task_paths, *sb.spec.network == NetworkPolicy::kNone, &home);
  if (!ns.ok()) return ns.status();
  sb.namespaces = *std::move(ns);
  sb.home_fd = std::move(sb.namespaces.home);
  sb.layers = layering.layers;
  Protections& p = sb.protections;
  p.mount_namespace = true;
  p.hidepid = sb.namespaces.hidepid;
  p.network_namespace = sb.namespaces.net.valid();
  return absl::OkStatus();
}

absl::StatusOr<std::map<uid_t, UniqueFd>> SandboxManager::LayerUserNamespaces(const LayerStack& layers, uid_t uid) {
  std::map<uid_t, UniqueFd> userns;  // one per owner of layers other than `uid`
  for (const ForkLayer* layer : LayersOf(layers)) {
    if (layer->owner == uid || userns.contains(layer->owner)) continue;
    CORRAL_ASSIGN_OR_RETURN(userns[layer->owner], CreateUserNamespace(uid, uid, layer->owner, layer->owner));
  }
  return userns;
}

absl::StatusOr<SandboxManager::CreateResult> SandboxManager::Fork(const std::string& id, int64_t count,
                                                                  const std::map<std::string, std::string>& labels,
                                                                  absl::Duration wait) {
  if (count < 1 || count > options_.max_create_count) {
    return absl::InvalidArgumentError(absl::StrCat("count must be 1-", options_.max_create_count));
  }
  if (!features_.forks || layers_ == nullptr) {
    return absl::FailedPreconditionError(
        "this host cannot fork sandboxes (it needs mount namespaces and idmapped mounts: Linux 5.19+, "
        "CAP_SYS_ADMIN, its root on ext4/xfs/btrfs)");
  }
  CORRAL_RETURN_IF_ERROR(ValidateLabels("labels", labels));
  std::shared_ptr<Sandbox> parent;
  {
    absl::MutexLock lock(&mu_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) return absl::NotFoundError(absl::StrCat("sandbox '", id, "' not found"));
    if (it->second->spec.upper_on_disk) {
      return absl::FailedPreconditionError(absl::StrCat("sandbox '", id, "' builds a template: it cannot be forked"));
    }
    if (it->second->forking) return absl::FailedPreconditionError(absl::StrCat("sandbox '", id, "' is being forked"));
    parent = it->second;
    parent->forking = true;  // from here, new calls on it get UNAVAILABLE
  }
  const int64_t granted = Reserve(count);
  auto finish = [&](absl::Status s) {
    parent->forking = false;
    {
      absl::MutexLock lock(&mu_);
      reserved_ -= granted;
    }
    const bool refused = absl::IsFailedPrecondition(s) || absl::IsAborted(s);
    if (metrics_) metrics_->forks.Add({{"outcome", refused ? "refused" : "failed"}}).Increment();
    return s;
  };
  // Nothing may still write into what is about to be frozen: no process of its uid (background and escaped ones
  // included), no call holding it (any reference but the map's and ours: an exec, a file stream). With `wait`,
  // they get that long to end; without, 500 ms (a finished exec is held a moment while its output drains).
  const absl::Time give_up = clock_->Now() + std::max(wait, absl::Milliseconds(500));
  for (;; absl::SleepFor(absl::Milliseconds(5))) {
    size_t processes = 0;
    {
      absl::MutexLock uid_lock(&parent->uid_mu);
      processes = ProcessesOf(parent->uid).size();
    }
    if (processes == 0 && parent->running == 0 && parent.use_count() <= 2) break;
    if (parent->delete_requested) {
      return finish(absl::AbortedError(absl::StrCat("sandbox '", id, "' is being deleted; the fork was given up")));
    }
    if (clock_->Now() < give_up) continue;
    return finish(absl::FailedPreconditionError(
        processes > 0 ? absl::StrCat("sandbox '", id, "' has ", processes,
                                     " process(es) running (background ones included); a fork carries no process: "
                                     "end them first, or fork with a wait")
                      : absl::StrCat("sandbox '", id, "' has a call under way; a fork waits for none unless asked")));
  }
  const absl::Time start = clock_->Now();
  // An image sandbox's children are made from its image (and template), with its layers above them.
  std::optional<Image> image;
  if (parent->in_image()) {
    auto found = images_->Find(parent->image_digest);
    if (!found.ok()) return finish(found.status());
    image = *std::move(found);
  }
  const Image* oci_image = image ? &*image : nullptr;
  // Freeze what the parent wrote since its last fork (all of its home the first time; an image sandbox's tmpfs
  // upper) into a layer; nothing written since then: its layers are shared as they are, and the parent is left
  // as it is.
  const bool in_image = oci_image != nullptr;
  const bool was_home = !in_image && parent->layers == nullptr;
  std::error_code ec;
  const bool unchanged = in_image ? IsEmptyDirAt(parent->rw_tree.get(), "upper")
                                  : !was_home && fs::is_empty(parent->dir + "/rw/upper", ec) && !ec;
  LayerStack layer = parent->layers;
  std::shared_ptr<Sandbox> next;  // the parent's new generation
  if (!unchanged) {
    auto frozen = in_image   ? layers_->FreezeTree(parent->rw_tree, parent->uid, parent->layers)
                  : was_home ? layers_->FreezeHome(parent->home, parent->uid)
                             : layers_->FreezeUpper(parent->dir + "/rw", parent->uid, parent->layers);
    if (!frozen.ok()) return finish(frozen.status());
    if (in_image) parent->rw_tree.Reset();  // the layer holds its tmpfs now
    layer = *std::move(frozen);
    Layering layering{layer, parent.get()};
    auto built = Build(parent->spec, in_image ? parent->template_image : nullptr, oci_image, &layering);
    if (!built.ok()) {
      if (in_image) {  // its tmpfs is still its upper, in its own namespace: only the handle comes back
        auto tree = layers_->ThawTree(*layer);
        if (tree.ok()) parent->rw_tree = *std::move(tree);
      } else if (absl::Status s = layers_->Thaw(was_home ? parent->home : parent->dir + "/rw", was_home, layer);
                 !s.ok()) {
        spdlog::error("sandbox {}: a failed fork could not put its files back: {}", id, s);
      }
      return finish(built.status());
    }
    next = *std::move(built);
    // The new generation takes over whatever happens next: the old overlay's work directory is not needed (no
    // process or call can reach the old generation while it is forking).
    if (!was_home && !in_image) ForkLayers::ClearFrozenWork(parent->dir + "/rw");
    if (in_image) {  // the new generation pinned the image and counted the template again: the old one lets go
      images_->Unpin(parent->image_digest);
      if (parent->template_image) parent->template_image->sandboxes--;
    }
    next->cgroup = std::move(parent->cgroup);
    next->template_image = parent->template_image;
    next->forked_from = parent->forked_from;
  }
  SandboxSpec child_spec = parent->spec;
  for (const auto& [k, v] : labels) child_spec.labels[k] = v;
  CreateResult result;
  result.rejected = count - granted;
  if (result.rejected > 0) result.rejected_reason = "host capacity";
  std::vector<std::shared_ptr<Sandbox>> children;
  absl::Status error;
  for (int64_t i = 0; i < granted && error.ok(); ++i) {
    Layering layering{layer, nullptr};
    auto child = Build(child_spec, in_image ? parent->template_image : nullptr, oci_image, &layering);
    if (child.ok()) {
      (*child)->forked_from = id;
      children.push_back(*std::move(child));
    } else if (absl::IsResourceExhausted(child.status())) {
      result.rejected += granted - i;
      result.rejected_reason = "uid pool exhausted";
      break;
    } else {
      error = child.status();
    }
  }
  if (!error.ok()) {
    for (auto& c : children) (void)Teardown(*c);
    children.clear();
  }
  // The parent's new generation takes its place even when no child could be made: its files are in the layer.
  absl::MutexLock lock(&mu_);
  reserved_ -= granted;
  auto it = sandboxes_.find(id);
  if (next != nullptr && it != sandboxes_.end() && it->second == parent) it->second = next;
  parent->forking = false;
  if (!error.ok()) {
    if (metrics_) metrics_->forks.Add({{"outcome", "failed"}}).Increment();
    return error;
  }
  for (auto& c : children) {
    sandboxes_.emplace(c->id, c);
    result.created.push_back({c, signer_->Sign(kSandboxTokenPurpose, c->id)});
  }
  if (metrics_) {
    metrics_->created.Increment(static_cast<double>(children.size()));
    metrics_->live.Set(static_cast<double>(sandboxes_.size()));
    metrics_->forks.Add({{"outcome", "forked"}}).Increment();
    metrics_->fork_seconds.Observe(absl::ToDoubleSeconds(clock_->Now() - start));
  }
  spdlog::info("sandbox {}: forked into {} in {}{}", id, children.size(), absl::FormatDuration(clock_->Now() - start),
               unchanged ? " (nothing written since its last fork)" : "");
  return result;
}

}  // namespace corral::sandbox
