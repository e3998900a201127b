#include "services/scheduler/lease/sandbox_templates.h"

#include <algorithm>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "libs/api/proto_time.h"
#include "libs/async/callback.h"
#include "libs/async/spawn.h"
#include "libs/core/logging.h"
#include "openssl/rand.h"
#include "spdlog/spdlog.h"

namespace corral::scheduler {

namespace asio = boost::asio;

namespace {

constexpr int kMaxTags = 16;
constexpr int kMaxAnnotations = 64;
constexpr int kMaxLogLines = 256;
constexpr size_t kMaxLogLine = 4096;

std::string NewId(const char* prefix) {
  unsigned char raw[10];
  RAND_bytes(raw, sizeof raw);
  return prefix + absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(raw), sizeof raw));
}

// 1-`max` characters, each alphanumeric or one of `extra`.
bool IsWord(const std::string& s, size_t max, absl::string_view extra) {
  if (s.empty() || s.size() > max) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || extra.find(c) != absl::string_view::npos;
  });
}

absl::Status CheckOwner(const std::string& owner) {
  if (owner.size() > kMaxOwnerLength) return absl::InvalidArgumentError("owner: at most 128 characters");
  return absl::OkStatus();
}

absl::Status TemplateNotFound(const v1::GetTemplateRequest& r) {
  return absl::NotFoundError(
      absl::StrCat("template '", r.template_id().empty() ? r.name() : r.template_id(), "' not found"));
}

}  // namespace

SandboxTemplates::SandboxTemplates(SandboxLeases* leases, asio::any_io_executor executor, Clock* clock,
                                   TemplateLog* log, TemplateLimits limits)
    : leases_(leases), executor_(std::move(executor)), clock_(clock), log_(log), limits_(limits) {}

const v1::SandboxTemplate* SandboxTemplates::Find(const v1::GetTemplateRequest& r) const {
  std::string id = r.template_id();
  if (id.empty()) {
    auto named = names_.find({r.owner(), r.name()});
    if (named == names_.end()) return nullptr;
    id = named->second;
  }
  auto it = templates_.find(id);
  if (it == templates_.end() || it->second.owner() != r.owner()) return nullptr;
  return &it->second;
}

v1::TemplateBuild* SandboxTemplates::FindBuild(const std::string& template_id, const std::string& build_id) {
  auto it = templates_.find(template_id);
  if (it == templates_.end()) return nullptr;
  for (v1::TemplateBuild& b : *it->second.mutable_builds()) {
    if (b.build_id() == build_id) return &b;
  }
  return nullptr;
}

void SandboxTemplates::Log(v1::TemplateBuild* build, const std::string& level, const std::string& message) {
  v1::TemplateLogEntry* e = build->add_logs();
  ToProto(clock_->Now(), e->mutable_time());
  e->set_level(level);
  e->set_message(message);
}

asio::awaitable<absl::StatusOr<v1::SandboxTemplate>> SandboxTemplates::Request(v1::RequestTemplateBuildRequest r) {
  if (absl::Status s = CheckOwner(r.owner()); !s.ok()) co_return s;
  if (!IsWord(r.name(), 128, "._/-")) {
    co_return absl::InvalidArgumentError("name must be 1-128 characters of [A-Za-z0-9._/-]");
  }
  if (r.tags_size() > kMaxTags) co_return absl::InvalidArgumentError("tags: at most 16");
  for (const std::string& tag : r.tags()) {
    if (!IsWord(tag, 64, "._-")) co_return absl::InvalidArgumentError("tags must be 1-64 characters of [A-Za-z0-9._-]");
  }
  v1::SandboxTemplate saved;
  {
    absl::MutexLock lock(&mu_);
    auto named = names_.find({r.owner(), r.name()});
    if (named == names_.end()) {
      const size_t owned = std::count_if(names_.begin(), names_.end(),
                                         [&](const auto& entry) { return entry.first.first == r.owner(); });
      if (owned >= limits_.max_templates) {
        co_return absl::ResourceExhaustedError(
            absl::StrCat("an owner may have at most ", limits_.max_templates, " templates: delete some first"));
      }
      v1::SandboxTemplate t;
      t.set_template_id(NewId("tpl-"));
      t.set_owner(r.owner());
      t.set_name(r.name());
      ToProto(clock_->Now(), t.mutable_create_time());
      named = names_.emplace(std::make_pair(r.owner(), r.name()), t.template_id()).first;
      templates_[t.template_id()] = std::move(t);
    }
    v1::SandboxTemplate& t = templates_[named->second];
    v1::TemplateBuild* build = t.add_builds();
    build->set_build_id(NewId("bld-"));
    build->set_status(v1::TEMPLATE_BUILD_STATUS_WAITING);
    if (r.tags().empty()) build->add_tags("default");
    for (const std::string& tag : r.tags()) build->add_tags(tag);
    ToProto(clock_->Now(), build->mutable_create_time());
    // The oldest go first, but never one still building (its coroutine finds it by id) nor a ready one a tag
    // still names.
    for (int i = 0; static_cast<size_t>(t.builds_size()) > limits_.max_builds && i + 1 < t.builds_size();) {
      const v1::TemplateBuild& b = t.builds(i);
      const bool kept = b.status() == v1::TEMPLATE_BUILD_STATUS_BUILDING ||
                        (b.status() == v1::TEMPLATE_BUILD_STATUS_READY && !b.tags().empty());
      if (kept) {
        ++i;
      } else {
        t.mutable_builds()->DeleteSubrange(i, 1);
      }
    }
    saved = t;
  }
  if (absl::Status s = co_await Save(saved); !s.ok()) co_return s;
  co_return saved;
}

asio::awaitable<absl::StatusOr<v1::SandboxTemplate>> SandboxTemplates::Start(v1::StartTemplateBuildRequest r) {
  if (absl::Status s = CheckLeaseEnvironment(r.environment()); !s.ok()) co_return s;
  if (r.annotations_size() > kMaxAnnotations) co_return absl::InvalidArgumentError("annotations: at most 64");
  for (const auto& [k, v] : r.annotations()) {
    if (k.empty() || k.size() > 256 || v.size() > 65536) {
      co_return absl::InvalidArgumentError("annotations: keys of 1-256 bytes, values of at most 64 KiB");
    }
  }
  if (r.log_lines_size() > kMaxLogLines) co_return absl::InvalidArgumentError("log_lines: at most 256");
  v1::SandboxTemplate saved;
  {
    absl::MutexLock lock(&mu_);
    v1::GetTemplateRequest get;
    get.set_owner(r.owner());
    get.set_template_id(r.template_id());
    v1::TemplateBuild* build = Find(get) == nullptr ? nullptr : FindBuild(r.template_id(), r.build_id());
    if (build == nullptr) {
      co_return absl::NotFoundError(
          absl::StrCat("build '", r.build_id(), "' of template '", r.template_id(), "' not found"));
    }
    if (build->status() != v1::TEMPLATE_BUILD_STATUS_WAITING) {
      co_return absl::FailedPreconditionError(absl::StrCat("build '", r.build_id(), "' was started already"));
    }
    build->set_status(v1::TEMPLATE_BUILD_STATUS_BUILDING);
    *build->mutable_environment() = r.environment();
    *build->mutable_annotations() = r.annotations();
    ToProto(clock_->Now(), build->mutable_start_time());
    for (const std::string& line : r.log_lines()) Log(build, "info", line.substr(0, kMaxLogLine));
    saved = templates_[r.template_id()];
  }
  if (absl::Status s = co_await Save(saved); !s.ok()) co_return s;
  async::Spawn(executor_, Build(r.template_id(), r.build_id(), r.environment()), "a template build");
  co_return saved;
}

asio::awaitable<void> SandboxTemplates::Build(std::string template_id, std::string build_id, v1::EnvironmentSpec env) {
  const absl::Time started = clock_->Now();
  v1::LeaseSandboxRequest request;
  *request.mutable_environment() = std::move(env);
  request.set_owner(kTemplateBuildOwner);
  ToProto(limits_.build_ttl, request.mutable_ttl());
  (*request.mutable_labels())["corral.template"] = template_id;
  absl::StatusOr<v1::SandboxLease> placed = co_await leases_->Lease(std::move(request));
  if (placed.ok()) {
    absl::Status released = co_await leases_->Release(placed->lease_id(), kTemplateBuildOwner);
    if (!released.ok()) spdlog::warn("template {}: releasing its build's lease: {}", template_id, released);
  }
  v1::SandboxTemplate saved;
  {
    absl::MutexLock lock(&mu_);
    v1::TemplateBuild* build = FindBuild(template_id, build_id);
    if (build == nullptr) co_return;  // deleted meanwhile
    const std::string took = absl::FormatDuration(absl::Trunc(clock_->Now() - started, absl::Milliseconds(1)));
    if (placed.ok()) {
      build->set_status(v1::TEMPLATE_BUILD_STATUS_READY);
      build->set_host_address(placed->host_address());
      build->set_template_key(placed->template_key());
      Log(build, "info",
          absl::StrCat("Built in ", took, " on ", placed->host_address(),
                       placed->template_key().empty() ? "" : " as template " + placed->template_key()));
      // A tag names one ready build: the newest.
      for (v1::TemplateBuild& other : *templates_[template_id].mutable_builds()) {
        if (&other == build) continue;
        auto* tags = other.mutable_tags();
        auto taken = [&](const std::string& t) { return absl::c_linear_search(build->tags(), t); };
        tags->erase(std::remove_if(tags->begin(), tags->end(), taken), tags->end());
      }
    } else {
      build->set_status(v1::TEMPLATE_BUILD_STATUS_FAILED);
      build->set_error(std::string(placed.status().message()));
      Log(build, "error", absl::StrCat("Build failed after ", took, ": ", placed.status().message()));
    }
    ToProto(clock_->Now(), build->mutable_end_time());
    saved = templates_[template_id];
  }
  spdlog::info("template {} ({}): build {} {}", template_id, saved.name(), build_id,
               placed.ok() ? "ready" : absl::StrCat("failed: ", placed.status().message()));
  if (absl::Status s = co_await Save(std::move(saved)); !s.ok()) spdlog::warn("template {}: {}", template_id, s);
}

absl::StatusOr<v1::SandboxTemplate> SandboxTemplates::Get(const v1::GetTemplateRequest& r) const {
  if (r.template_id().empty() == r.name().empty()) {
    return absl::InvalidArgumentError("name the template by one of template_id and name");
  }
  absl::MutexLock lock(&mu_);
  const v1::SandboxTemplate* t = Find(r);
  if (t == nullptr) return TemplateNotFound(r);
  return *t;
}

absl::Status SandboxTemplates::Delete(const v1::GetTemplateRequest& r) {
  if (r.template_id().empty() == r.name().empty()) {
    return absl::InvalidArgumentError("name the template by one of template_id and name");
  }
  std::string id;
  {
    absl::MutexLock lock(&mu_);
    const v1::SandboxTemplate* t = Find(r);
    if (t == nullptr) return TemplateNotFound(r);
    id = t->template_id();
    names_.erase({t->owner(), t->name()});
    templates_.erase(id);
  }
  if (log_ != nullptr) log_->DropTemplate(id);
  spdlog::info("template {} deleted", id);
  return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<v1::TemplateFile>> SandboxTemplates::PutFile(v1::TemplateFile file) {
  if (absl::Status s = CheckOwner(file.owner()); !s.ok()) co_return s;
  if (!IsWord(file.hash(), 128, "._-")) {
    co_return absl::InvalidArgumentError("hash must be 1-128 characters of [A-Za-z0-9._-]");
  }
  if (file.content().size() > limits_.max_file_bytes) {
    co_return absl::InvalidArgumentError(
        absl::StrCat("a template file may hold at most ", limits_.max_file_bytes, " bytes"));
  }
  if (log_ == nullptr) co_return absl::FailedPreconditionError("this scheduler keeps no files (no journal)");
  const absl::Time now = clock_->Now();
  file.set_size_bytes(file.content().size());
  TemplateLog* log = log_;
  absl::Status saved = co_await async::AwaitCallback<absl::Status>(
      [log, &file, now](std::function<void(absl::Status)> done) { log->SaveTemplateFile(file, now, std::move(done)); });
  if (!saved.ok()) co_return saved;
  std::vector<std::string> dropped;
  {
    absl::MutexLock lock(&mu_);
    files_[{file.owner(), file.hash()}] = FileIndex{file.size_bytes(), now};
    std::vector<std::pair<absl::Time, std::string>> owned;
    for (const auto& [key, index] : files_) {
      if (key.first == file.owner()) owned.emplace_back(index.time, key.second);
    }
    std::sort(owned.begin(), owned.end());
    for (size_t i = 0; i + limits_.max_files < owned.size(); ++i) {
      files_.erase({file.owner(), owned[i].second});
      dropped.push_back(owned[i].second);
    }
  }
  for (const std::string& hash : dropped) log_->DropTemplateFile(file.owner(), hash);
  file.clear_content();
  co_return file;
}

absl::StatusOr<v1::TemplateFile> SandboxTemplates::GetFile(const v1::GetTemplateFileRequest& r) const {
  v1::TemplateFile out;
  out.set_owner(r.owner());
  out.set_hash(r.hash());
  {
    absl::MutexLock lock(&mu_);
    auto it = files_.find({r.owner(), r.hash()});
    if (it == files_.end()) return absl::NotFoundError(absl::StrCat("template file '", r.hash(), "' not found"));
    out.set_size_bytes(it->second.size);
  }
  if (r.content()) {
    absl::StatusOr<std::string> content = log_->LoadTemplateFile(r.owner(), r.hash());
    if (!content.ok()) return content.status();
    out.set_content(*std::move(content));
  }
  return out;
}

void SandboxTemplates::Restore(std::vector<v1::SandboxTemplate> templates, std::vector<TemplateFileEntry> files) {
  absl::MutexLock lock(&mu_);
  for (v1::SandboxTemplate& t : templates) {
    for (v1::TemplateBuild& b : *t.mutable_builds()) {
      if (b.status() != v1::TEMPLATE_BUILD_STATUS_BUILDING) continue;
      b.set_status(v1::TEMPLATE_BUILD_STATUS_FAILED);
      b.set_error("interrupted: the scheduler restarted during the build; build it again");
      Log(&b, "error", b.error());
    }
    names_[{t.owner(), t.name()}] = t.template_id();
    templates_[t.template_id()] = std::move(t);
  }
  for (TemplateFileEntry& f : files) files_[{f.owner, f.hash}] = FileIndex{f.size, f.time};
  if (!templates.empty())
    spdlog::info("restored {} sandbox templates, {} template files", templates.size(), files.size());
}

size_t SandboxTemplates::size() const {
  absl::MutexLock lock(&mu_);
  return templates_.size();
}

asio::awaitable<absl::Status> SandboxTemplates::Save(v1::SandboxTemplate t) {
  if (log_ == nullptr) co_return absl::OkStatus();
  TemplateLog* log = log_;
  auto save = [log, t = std::move(t)](std::function<void(absl::Status)> done) { log->SaveTemplate(t, done); };
  co_return co_await async::AwaitCallback<absl::Status>(std::move(save));
}

}  // namespace corral::scheduler
