// The scheduler's sandbox templates (TemplateApi) for the sandbox API's unit tests: templates and files kept in
// maps, with the rules the E2B front relies on (names per owner, another owner's template NOT_FOUND, a build
// started once). A build stays BUILDING until the test ends it with Finish. Thread-safe.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "services/sandbox_api/lease_client.h"

namespace corral::sandbox_api::testing_support {

class FakeTemplates final : public TemplateApi {
 public:
  boost::asio::awaitable<absl::StatusOr<v1::SandboxTemplate>> RequestBuild(v1::RequestTemplateBuildRequest r) override {
    absl::MutexLock lock(&mu_);
    std::string& id = names_[{r.owner(), r.name()}];
    if (id.empty()) {
      id = absl::StrCat("tpl-", ++next_);
      templates_[id].set_template_id(id);
      templates_[id].set_owner(r.owner());
      templates_[id].set_name(r.name());
    }
    v1::TemplateBuild* b = templates_[id].add_builds();
    b->set_build_id(absl::StrCat("bld-", ++next_));
    b->set_status(v1::TEMPLATE_BUILD_STATUS_WAITING);
    if (r.tags().empty()) b->add_tags("default");
    for (const std::string& t : r.tags()) b->add_tags(t);
    *b->mutable_annotations() = r.annotations();
    co_return templates_[id];
  }
  boost::asio::awaitable<absl::StatusOr<v1::SandboxTemplate>> StartBuild(v1::StartTemplateBuildRequest r) override {
    absl::MutexLock lock(&mu_);
    v1::TemplateBuild* b = Build(r.owner(), r.template_id(), r.build_id());
    if (b == nullptr) co_return absl::NotFoundError("no such build");
    if (b->status() != v1::TEMPLATE_BUILD_STATUS_WAITING) co_return absl::FailedPreconditionError("started already");
    b->set_status(v1::TEMPLATE_BUILD_STATUS_BUILDING);
    *b->mutable_environment() = r.environment();
    for (const auto& [k, v] : r.annotations()) (*b->mutable_annotations())[k] = v;
    for (const std::string& line : r.log_lines()) b->add_logs()->set_message(line);
    co_return templates_[r.template_id()];
  }
  boost::asio::awaitable<absl::StatusOr<v1::SandboxTemplate>> GetTemplate(v1::GetTemplateRequest r) override {
    absl::MutexLock lock(&mu_);
    const v1::SandboxTemplate* t = Find(r);
    if (t == nullptr) co_return absl::NotFoundError("no such template");
    co_return *t;
  }
  boost::asio::awaitable<absl::Status> DeleteTemplate(v1::GetTemplateRequest r) override {
    absl::MutexLock lock(&mu_);
    const v1::SandboxTemplate* t = Find(r);
    if (t == nullptr) co_return absl::NotFoundError("no such template");
    names_.erase({t->owner(), t->name()});
    templates_.erase(t->template_id());
    co_return absl::OkStatus();
  }
  boost::asio::awaitable<absl::StatusOr<v1::TemplateFile>> PutFile(v1::TemplateFile file) override {
    absl::MutexLock lock(&mu_);
    files_[{file.owner(), file.hash()}] = file.content();
    file.clear_content();
    co_return file;
  }
  boost::asio::awaitable<absl::StatusOr<v1::TemplateFile>> GetFile(v1::GetTemplateFileRequest r) override {
    absl::MutexLock lock(&mu_);
    auto it = files_.find({r.owner(), r.hash()});
    if (it == files_.end()) co_return absl::NotFoundError("no such file");
    v1::TemplateFile out;
    out.set_hash(r.hash());
    if (r.content()) out.set_content(it->second);
    co_return out;
  }

  // Ends a BUILDING build: READY, or FAILED with `error` as the scheduler words it.
  void Finish(const std::string& owner, const std::string& template_id, const std::string& build_id,
              const std::string& error = "") {
    absl::MutexLock lock(&mu_);
    v1::TemplateBuild* b = Build(owner, template_id, build_id);
    b->set_status(error.empty() ? v1::TEMPLATE_BUILD_STATUS_READY : v1::TEMPLATE_BUILD_STATUS_FAILED);
    b->set_error(error);
    b->add_logs()->set_message(error.empty() ? "Built" : error);
  }
  v1::TemplateBuild Last(const std::string& template_id) {
    absl::MutexLock lock(&mu_);
    const v1::SandboxTemplate& t = templates_.at(template_id);
    return t.builds(t.builds_size() - 1);
  }

 private:
  const v1::SandboxTemplate* Find(const v1::GetTemplateRequest& r) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::string id = r.template_id();
    if (id.empty()) {
      auto named = names_.find({r.owner(), r.name()});
      if (named == names_.end()) return nullptr;
      id = named->second;
    }
    auto it = templates_.find(id);
    return it == templates_.end() || it->second.owner() != r.owner() ? nullptr : &it->second;
  }
  v1::TemplateBuild* Build(const std::string& owner, const std::string& id, const std::string& build_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = templates_.find(id);
    if (it == templates_.end() || it->second.owner() != owner) return nullptr;
    for (v1::TemplateBuild& b : *it->second.mutable_builds()) {
      if (b.build_id() == build_id) return &b;
    }
    return nullptr;
  }

  mutable absl::Mutex mu_;
  int next_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, v1::SandboxTemplate> templates_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, std::string> names_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, std::string> files_ ABSL_GUARDED_BY(mu_);
};

}  // namespace corral::sandbox_api::testing_support
