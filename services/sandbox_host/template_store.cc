#include "services/sandbox_host/template_store.h"

#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "libs/core/logging.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox {

namespace fs = std::filesystem;

TemplateImage::~TemplateImage() {
  std::error_code ec;
  fs::remove_all(dir, ec);  // never follows symlinks
}

TemplateStore::TemplateStore(std::string dir, TemplateLimits limits, Clock* clock, SandboxHostMetrics* metrics)
    : dir_(std::move(dir)), limits_(limits), clock_(clock), metrics_(metrics) {
  std::error_code ec;
  fs::remove_all(dir_, ec);
  fs::create_directories(dir_, ec);
  fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::replace, ec);
}

TemplateStore::~TemplateStore() { Stop(); }

void TemplateStore::Stop() {
  cancelled_ = true;
  cancelled_.notify_all();  // a build blocked in cancelled.wait(false) returns now
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* n) { return *n == 0; }, &active_builds_));
}

TemplateInfo TemplateStore::Snapshot(const Entry& entry) const {
  TemplateInfo info = entry.info;
  if (entry.image) info.sandboxes = entry.image->sandboxes.load();
  return info;
}

void TemplateStore::Prepare(const std::string& key, const std::string& digest, BuildFn build, Done done,
                            const std::string& image_digest) {
  absl::StatusOr<TemplateInfo> now;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      if (it->second.info.digest != digest) {
        now = absl::AlreadyExistsError(
            absl::StrCat("template '", key, "' exists with different content (files, commands or environment)"));
      } else if (it->second.info.state == TemplateState::kBuilding) {
        it->second.waiters.push_back(std::move(done));  // built once; every caller gets that outcome
        return;
      } else {
        now = Snapshot(it->second);
      }
    } else if (static_cast<int64_t>(entries_.size()) >= limits_.max_templates) {
      now = absl::ResourceExhaustedError(absl::StrCat("the host keeps at most ", limits_.max_templates, " templates"));
    } else {
      Entry& entry = entries_[key];
      entry.info =
          TemplateInfo{.key = key, .digest = digest, .create_time = clock_->Now(), .image_digest = image_digest};
      entry.waiters.push_back(std::move(done));
      ++active_builds_;
      std::thread([this, key, build = std::move(build)]() mutable { Build(key, std::move(build)); }).detach();
      return;
    }
  }
  done(std::move(now));
}

void TemplateStore::Build(std::string key, BuildFn build) {
  const absl::Time start = clock_->Now();
  std::string dir, image_digest;
  {
    absl::MutexLock lock(&mu_);
    dir = absl::StrCat(dir_, "/", key, ".", next_build_++);
    image_digest = entries_[key].info.image_digest;
  }
  std::error_code ec;
  fs::create_directory(dir, ec);
  auto image = std::make_shared<TemplateImage>();
  image->key = key;
  image->dir = dir;  // removed with the image if the build fails
  image->image_digest = image_digest;
  absl::StatusOr<CopyStats> stats =
      ec ? absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message())) : build(dir, cancelled_);
  std::vector<Done> waiters;
  std::vector<ReadyFn> ready_waiters;
  absl::StatusOr<TemplateInfo> outcome;
  {
    absl::MutexLock lock(&mu_);
    uint64_t used = 0;
    for (const auto& [k, e] : entries_) used += e.info.size_bytes;
    if (stats.ok() && used + stats->bytes > limits_.max_bytes) {
      stats = absl::ResourceExhaustedError(absl::StrCat("template storage is full (", limits_.max_bytes, " bytes)"));
    }
    Entry& entry = entries_[key];
    waiters.swap(entry.waiters);
    ready_waiters.swap(entry.ready_waiters);
    if (stats.ok()) {
      image->method = stats->reflinked ? CloneMethod::kReflink : CloneMethod::kCopy;
      entry.image = image;
      entry.info.state = TemplateState::kReady;
      entry.info.size_bytes = stats->bytes;
      entry.info.method = image->method;
      entry.info.build_duration = clock_->Now() - start;
      entry.info.last_used = clock_->Now();
      outcome = Snapshot(entry);
    } else {
      entries_.erase(key);  // nothing is kept: a later prepare retries
      outcome = stats.status();
    }
  }
  if (metrics_) {
    metrics_->TemplateBuild(outcome.ok() ? "ready" : "failed").Observe(absl::ToDoubleSeconds(clock_->Now() - start));
  }
  if (outcome.ok()) {
    spdlog::info("template {}: ready in {} ({} bytes)", key, absl::FormatDuration(clock_->Now() - start),
                 outcome->size_bytes);
  } else {
    spdlog::info("template {}: build failed: {}", key, outcome.status());
  }
  for (auto& w : ready_waiters) {
    w(outcome.ok() ? absl::StatusOr<std::shared_ptr<const TemplateImage>>(image)
                   : absl::NotFoundError(absl::StrCat("template '", key, "' failed to build")));
  }
  image.reset();  // the store's entry owns it now (or, after a failure, its directory goes here)
  for (auto& w : waiters) w(outcome);
  absl::MutexLock lock(&mu_);
  --active_builds_;
}

void TemplateStore::WhenReady(const std::string& key, ReadyFn ready) {
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second.info.state == TemplateState::kBuilding) {
      it->second.ready_waiters.push_back(std::move(ready));
      return;
    }
  }
  ready(Acquire(key));
}

absl::StatusOr<std::shared_ptr<const TemplateImage>> TemplateStore::Acquire(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.info.state != TemplateState::kReady) {
    return absl::NotFoundError(absl::StrCat("template '", key, "' is not prepared on this host"));
  }
  it->second.info.last_used = clock_->Now();
  return std::shared_ptr<const TemplateImage>(it->second.image);
}

std::vector<TemplateInfo> TemplateStore::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<TemplateInfo> out;
  for (const auto& [key, entry] : entries_) out.push_back(Snapshot(entry));
  return out;
}

absl::Status TemplateStore::Delete(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return absl::NotFoundError(absl::StrCat("template '", key, "' not found"));
  if (it->second.info.state == TemplateState::kBuilding) {
    return absl::FailedPreconditionError(absl::StrCat("template '", key, "' is still building"));
  }
  entries_.erase(it);  // its files go when the last clone in progress lets go of the image
  return absl::OkStatus();
}

}  // namespace corral::sandbox
