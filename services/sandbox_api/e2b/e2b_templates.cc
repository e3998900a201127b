#include "services/sandbox_api/e2b/e2b_templates.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "libs/async/sleep.h"
#include "libs/http/url.h"
#include "services/sandbox_api/e2b/template_steps.h"

namespace corral::sandbox_api {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;

constexpr size_t kMaxUpload = 3 << 20;  // what the scheduler keeps of one file
constexpr size_t kLogPage = 100;        // entries per status answer, as E2B's
constexpr absl::Duration kReadyWait = absl::Minutes(2);
constexpr absl::Duration kReadyPoll = absl::Milliseconds(200);

E2bAnswer TemplateNotFound(const std::string& id) {
  return E2bError(404, absl::StrCat("template '", id, "' not found"));
}

// `name:tag` split; the tag "" when none.
std::pair<std::string, std::string> NameAndTag(const std::string& name) {
  std::pair<std::string, std::string> out = absl::StrSplit(name, absl::MaxSplits(':', 1));
  return out;
}

v1::GetTemplateRequest ByName(const std::string& owner, const std::string& name) {
  v1::GetTemplateRequest r;
  r.set_owner(owner);
  r.set_name(name);
  return r;
}

const v1::TemplateBuild* FindBuild(const v1::SandboxTemplate& t, const std::string& build_id) {
  for (const v1::TemplateBuild& b : t.builds()) {
    if (b.build_id() == build_id) return &b;
  }
  return nullptr;
}

// The newest ready build carrying `tag` (any tag when "").
const v1::TemplateBuild* ReadyBuild(const v1::SandboxTemplate& t, const std::string& tag) {
  for (auto it = t.builds().rbegin(); it != t.builds().rend(); ++it) {
    if (it->status() == v1::TEMPLATE_BUILD_STATUS_READY && (tag.empty() || absl::c_linear_search(it->tags(), tag))) {
      return &*it;
    }
  }
  return nullptr;
}

// A failed lookup as the SDK reads it: a missing template is a 404 naming it.
E2bAnswer LookupFailed(const absl::Status& s, const std::string& id) {
  return s.code() == absl::StatusCode::kNotFound ? TemplateNotFound(id) : E2bFromStatus(s);
}

const char* StatusName(v1::TemplateBuildStatus s) {
  switch (s) {
    case v1::TEMPLATE_BUILD_STATUS_WAITING: return "waiting";
    case v1::TEMPLATE_BUILD_STATUS_READY: return "ready";
    case v1::TEMPLATE_BUILD_STATUS_FAILED: return "error";
    default: return "building";
  }
}

json::object LogEntry(const v1::TemplateLogEntry& e) {
  return json::object{{"timestamp", JsonText(E2bTime(FromProto(e.time())))},
                      {"level", JsonText(e.level())},
                      {"message", JsonText(e.message())}};
}

// A positive whole number field (cpuCount, memoryMB); 0 when absent.
absl::StatusOr<int64_t> Count(const json::object& body, const char* field, int64_t max) {
  const json::value* v = body.if_contains(field);
  if (v == nullptr || v->is_null()) return 0;
  if (!v->is_int64() || v->as_int64() < 1 || v->as_int64() > max) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be a whole number of 1-", max));
  }
  return v->as_int64();
}

}  // namespace

asio::awaitable<absl::StatusOr<v1::SandboxTemplate>> E2bTemplates::Lookup(const std::string& owner,
                                                                          const std::string& id_or_name) {
  if (absl::StartsWith(id_or_name, "tpl-")) {  // an id, as POST /v3/templates answered; else a name so spelled
    v1::GetTemplateRequest r;
    r.set_owner(owner);
    r.set_template_id(id_or_name);
    auto t = co_await templates_->GetTemplate(std::move(r));
    if (t.status().code() != absl::StatusCode::kNotFound) co_return t;
  }
  co_return co_await templates_->GetTemplate(ByName(owner, id_or_name));
}

void AddE2bDefaults(const E2bOptions& options, v1::EnvironmentSpec* env) {
  env->add_task_paths(options.home);
  env->set_workdir(options.home);
}

bool E2bTemplates::Serves(const std::string& path) {
  return absl::StartsWith(path, "/templates") || absl::StartsWith(path, "/v2/templates") ||
         absl::StartsWith(path, "/v3/templates");
}

asio::awaitable<E2bAnswer> E2bTemplates::Handle(E2bRequest r) {
  std::vector<std::string> parts = absl::StrSplit(r.path, '/', absl::SkipEmpty());
  // The upload a link sends: signed, without an API key.
  if (r.method == "PUT" && parts.size() == 5 && parts[0] == "templates" && parts[2] == "files" &&
      parts[4] == "upload") {
    co_return co_await Upload(parts[3], r.query["token"], std::move(r.body));
  }
  auto owner = auth_->Owner(r.api_key);
  if (!owner.ok()) co_return E2bError(401, std::string(owner.status().message()));
  if (r.method == "POST" && parts.size() == 2 && parts[0] == "v3" && parts[1] == "templates") {
    co_return co_await Request(*std::move(owner), std::move(r.body));
  }
  if (r.method == "POST" && parts.size() == 5 && parts[0] == "v2" && parts[3] == "builds") {
    co_return co_await Trigger(*std::move(owner), parts[2], parts[4], std::move(r.body));
  }
  if (!parts.empty() && parts[0] == "templates") {
    if (r.method == "GET" && parts.size() == 4 && parts[2] == "files") {
      co_return co_await UploadLink(*std::move(owner), r.base_url, parts[1], parts[3]);
    }
    if (r.method == "GET" && parts.size() == 5 && parts[2] == "builds" && parts[4] == "status") {
      co_return co_await Status(*std::move(owner), parts[1], parts[3], r.query["logsOffset"]);
    }
    if (r.method == "GET" && parts.size() == 3 && parts[1] == "aliases") {
      auto alias = http::PercentDecode(parts[2], false);
      if (!alias.ok()) co_return E2bError(400, "malformed alias");
      co_return co_await Alias(*std::move(owner), *std::move(alias));
    }
    if (r.method == "GET" && parts.size() == 3 && parts[2] == "tags")
      co_return co_await Tags(*std::move(owner), parts[1]);
    if (r.method == "DELETE" && parts.size() == 2) co_return co_await Delete(*std::move(owner), parts[1]);
  }
  co_return E2bError(400, absl::StrCat("no such route: ", r.method, " ", r.path));
}

asio::awaitable<E2bAnswer> E2bTemplates::Request(std::string owner, std::string body_text) {
  auto body = E2bBody(body_text);
  if (!body.ok()) co_return E2bFromStatus(body.status());
  std::string full;
  for (const char* field : {"name", "alias"}) {  // alias: the older SDKs'
    if (const json::value* v = body->if_contains(field); full.empty() && v != nullptr && v->is_string()) {
      full = std::string(v->as_string());
    }
  }
  if (full.empty()) co_return E2bError(400, "name is required");
  auto [name, tag] = NameAndTag(full);
  v1::RequestTemplateBuildRequest request;
  request.set_owner(owner);
  request.set_name(name);
  if (!tag.empty()) request.add_tags(tag);
  if (const json::value* tags = body->if_contains("tags"); tags != nullptr && tags->is_array()) {
    for (const json::value& t : tags->as_array()) {
      if (!t.is_string()) co_return E2bError(400, "tags must be strings");
      request.add_tags(std::string(t.as_string()));
    }
  }
  auto cpu = Count(*body, "cpuCount", 64);
  auto memory = Count(*body, "memoryMB", 1 << 20);
  if (!cpu.ok() || !memory.ok()) co_return E2bFromStatus(!cpu.ok() ? cpu.status() : memory.status());
  if (*cpu > 0) (*request.mutable_annotations())[kCpuAnnotation] = absl::StrCat(*cpu);
  if (*memory > 0) (*request.mutable_annotations())[kMemoryAnnotation] = absl::StrCat(*memory);
  auto t = co_await templates_->RequestBuild(std::move(request));
  if (!t.ok()) co_return E2bFromStatus(t.status());
  const v1::TemplateBuild& build = t->builds(t->builds_size() - 1);
  json::array tags;
  for (const std::string& tag_name : build.tags()) tags.emplace_back(JsonText(tag_name));
  json::object out{{"templateID", JsonText(t->template_id())},
                   {"buildID", JsonText(build.build_id())},
                   {"aliases", json::array{JsonText(t->name())}},
                   {"names", json::array{JsonText(t->name())}},
                   {"tags", std::move(tags)},
                   {"public", false}};
  co_return E2bAnswer{202, json::serialize(out), {}};
}

asio::awaitable<E2bAnswer> E2bTemplates::UploadLink(std::string owner, std::string base_url, std::string id,
                                                    std::string hash) {
  auto t = co_await Lookup(owner, id);
  if (!t.ok()) co_return LookupFailed(t.status(), id);
  v1::GetTemplateFileRequest get;
  get.set_owner(owner);
  get.set_hash(hash);
  auto file = co_await templates_->GetFile(std::move(get));
  if (file.ok()) co_return E2bAnswer{201, R"({"present":true})", {}};
  if (file.status().code() != absl::StatusCode::kNotFound) co_return E2bFromStatus(file.status());
  if (base_url.empty()) co_return E2bError(400, "a Host header is needed to name the upload link");
  const std::string token = auth_->AccessToken(owner, "file-" + hash);
  json::object out{
      {"present", false},
      {"url", JsonText(absl::StrCat(base_url, "/templates/", id, "/files/", hash, "/upload?token=", token))}};
  co_return E2bAnswer{201, json::serialize(out), {}};
}

asio::awaitable<E2bAnswer> E2bTemplates::Upload(std::string hash, std::string token, std::string body) {
  auto owner = auth_->CheckAccess("file-" + hash, token);
  if (!owner.ok()) co_return E2bError(403, "the upload link is not valid");
  if (body.size() > kMaxUpload) {
    co_return E2bError(413, absl::StrCat("a COPY step's files may take at most ", kMaxUpload >> 20,
                                         " MiB packed; copy larger data into the sandbox after it starts"));
  }
  v1::TemplateFile file;
  file.set_owner(*owner);
  file.set_hash(hash);
  file.set_content(std::move(body));
  auto put = co_await templates_->PutFile(std::move(file));
  if (!put.ok()) co_return E2bFromStatus(put.status());
  co_return E2bAnswer{200, "", {}};
}

asio::awaitable<absl::StatusOr<v1::TemplateBuild>> E2bTemplates::Base(const std::string& owner,
                                                                      const json::object& body) {
  v1::TemplateBuild base;
  const json::value* from_template = body.if_contains("fromTemplate");
  if (from_template != nullptr && from_template->is_string() && !from_template->as_string().empty()) {
    const std::string name(from_template->as_string());
    if (IsPlainTemplate(name)) co_return base;  // a sandbox on the host's filesystem
    auto resolved = co_await Resolve(owner, name);
    if (!resolved.ok()) co_return resolved.status();
    if (!*resolved) co_return absl::NotFoundError(absl::StrCat("fromTemplate: template '", name, "' not found"));
    co_return **resolved;
  }
  if (body.if_contains("fromImageRegistry") != nullptr && !body.at("fromImageRegistry").is_null()) {
    co_return absl::InvalidArgumentError(
        "fromImageRegistry: registry credentials are not taken; import the image on the hosts (corral image import) "
        "and build from its name");
  }
  const json::value* image = body.if_contains("fromImage");
  if (image == nullptr || !image->is_string() || image->as_string().empty()) {
    co_return absl::InvalidArgumentError("fromImage or fromTemplate is required");
  }
  base.mutable_environment()->set_image(std::string(image->as_string()));
  co_return base;
}

asio::awaitable<E2bAnswer> E2bTemplates::Trigger(std::string owner, std::string id, std::string build_id,
                                                 std::string body_text) {
  auto body = E2bBody(body_text);
  if (!body.ok()) co_return E2bFromStatus(body.status());
  auto t = co_await Lookup(owner, id);
  if (!t.ok()) co_return LookupFailed(t.status(), id);
  const v1::TemplateBuild* build = FindBuild(*t, build_id);
  if (build == nullptr) co_return E2bError(404, absl::StrCat("build '", build_id, "' not found"));
  auto base = co_await Base(owner, *body);
  if (!base.ok()) co_return E2bFromStatus(base.status());
  auto hashes = CopyHashes(*body);
  if (!hashes.ok()) co_return E2bFromStatus(hashes.status());
  std::map<std::string, std::string> files;
  for (const std::string& hash : *hashes) {
    if (files.count(hash)) continue;
    v1::GetTemplateFileRequest get;
    get.set_owner(owner);
    get.set_hash(hash);
    get.set_content(true);
    auto file = co_await templates_->GetFile(std::move(get));
    if (file.ok()) files[hash] = std::move(*file->mutable_content());
    // A missing one: the plan names the step that needs it.
  }
  size_t total = 0;
  for (const auto& [hash, content] : files) total += content.size();
  if (total > kMaxUpload) {  // the environment travels in one message to the host that builds it
    co_return E2bError(400, absl::StrCat("the COPY steps of one build may upload at most ", kMaxUpload >> 20,
                                         " MiB in all (packed); copy larger data into the sandbox after it starts"));
  }
  (*body)["buildID"] = JsonText(build_id);
  auto plan = PlanTemplate(*body, &*base, files);
  if (!plan.ok()) co_return E2bFromStatus(plan.status());
  v1::EnvironmentSpec env = std::move(plan->environment);
  if (base->environment().task_paths().empty()) AddE2bDefaults(options_, &env);
  int64_t cpu = 0, memory_mb = 0;
  if (auto it = build->annotations().find(kCpuAnnotation); it != build->annotations().end()) {
    (void)absl::SimpleAtoi(it->second, &cpu);
  }
  if (auto it = build->annotations().find(kMemoryAnnotation); it != build->annotations().end()) {
    (void)absl::SimpleAtoi(it->second, &memory_mb);
  }
  // cpuCount is a share (the cgroup's weight, 100 per CPU), not a quota.
  if (cpu > 0) env.mutable_limits()->set_cpu_weight(static_cast<uint32_t>(std::min<int64_t>(cpu * 100, 10000)));
  if (memory_mb > 0) env.mutable_limits()->set_memory_bytes(static_cast<uint64_t>(memory_mb) << 20);

  v1::StartTemplateBuildRequest start;
  start.set_owner(owner);
  start.set_template_id(t->template_id());
  start.set_build_id(build_id);
  *start.mutable_environment() = std::move(env);
  start.mutable_annotations()->insert(plan->annotations.begin(), plan->annotations.end());
  const std::string& image = start.environment().image();
  start.add_log_lines(image.empty() ? "FROM a sandbox on the host's filesystem" : absl::StrCat("FROM ", image));
  for (std::string& line : plan->log_lines) start.add_log_lines(std::move(line));
  auto started = co_await templates_->StartBuild(std::move(start));
  if (!started.ok()) co_return E2bFromStatus(started.status());
  co_return E2bAnswer{202, "", {}};
}

asio::awaitable<E2bAnswer> E2bTemplates::Status(std::string owner, std::string id, std::string build_id,
                                                std::string offset_text) {
  size_t offset = 0;
  if (!offset_text.empty() && !absl::SimpleAtoi(offset_text, &offset)) {
    co_return E2bError(400, "logsOffset must be a whole number");
  }
  auto t = co_await Lookup(owner, id);
  if (!t.ok()) co_return LookupFailed(t.status(), id);
  const v1::TemplateBuild* build = FindBuild(*t, build_id);
  if (build == nullptr) co_return E2bError(404, absl::StrCat("build '", build_id, "' not found"));
  json::array entries;
  for (size_t i = offset; i < static_cast<size_t>(build->logs_size()) && entries.size() < kLogPage; ++i) {
    entries.push_back(LogEntry(build->logs(static_cast<int>(i))));
  }
  json::object out{{"templateID", JsonText(t->template_id())},
                   {"buildID", JsonText(build_id)},
                   {"status", StatusName(build->status())},
                   {"logEntries", std::move(entries)},
                   {"logs", json::array()}};
  if (build->status() == v1::TEMPLATE_BUILD_STATUS_FAILED) {
    auto [message, step] = DescribeFailure(*build);
    json::object reason{{"message", JsonText(message)}};
    if (!step.empty()) reason["step"] = JsonText(step);
    out["reason"] = std::move(reason);
  }
  co_return E2bAnswer{200, json::serialize(out), {}};
}

asio::awaitable<E2bAnswer> E2bTemplates::Alias(std::string owner, std::string alias) {
  auto t = co_await Lookup(owner, NameAndTag(alias).first);
  if (!t.ok()) co_return LookupFailed(t.status(), alias);
  // Not before a build of it is ready: Harbor builds a template that `exists` says is missing.
  if (ReadyBuild(*t, "") == nullptr) co_return TemplateNotFound(alias);
  json::object out{{"templateID", JsonText(t->template_id())}, {"public", false}};
  co_return E2bAnswer{200, json::serialize(out), {}};
}

asio::awaitable<E2bAnswer> E2bTemplates::Tags(std::string owner, std::string id) {
  auto t = co_await Lookup(owner, NameAndTag(id).first);
  if (!t.ok()) co_return LookupFailed(t.status(), id);
  json::array out;
  for (const v1::TemplateBuild& b : t->builds()) {
    if (b.status() != v1::TEMPLATE_BUILD_STATUS_READY) continue;
    for (const std::string& tag : b.tags()) {
      out.push_back(json::object{{"tag", JsonText(tag)},
                                 {"buildID", JsonText(b.build_id())},
                                 {"createdAt", JsonText(E2bTime(FromProto(b.create_time())))}});
    }
  }
  co_return E2bAnswer{200, json::serialize(out), {}};
}

asio::awaitable<E2bAnswer> E2bTemplates::Delete(std::string owner, std::string id) {
  auto t = co_await Lookup(owner, id);
  if (!t.ok()) co_return LookupFailed(t.status(), id);
  v1::GetTemplateRequest named;
  named.set_owner(owner);
  named.set_template_id(t->template_id());
  absl::Status deleted = co_await templates_->DeleteTemplate(std::move(named));
  if (deleted.code() == absl::StatusCode::kNotFound) co_return TemplateNotFound(id);
  if (!deleted.ok()) co_return E2bFromStatus(deleted);
  co_return E2bAnswer{204, "", {}};
}

asio::awaitable<absl::StatusOr<std::optional<v1::TemplateBuild>>> E2bTemplates::Resolve(std::string owner,
                                                                                        std::string name) {
  auto [base_name, tag] = NameAndTag(name);
  auto t = co_await Lookup(owner, base_name);
  if (t.status().code() == absl::StatusCode::kNotFound) co_return std::nullopt;
  if (!t.ok()) co_return t.status();
  // No tag: the one tagged "default", else the newest ready one (a template built only as "name:v1").
  const v1::TemplateBuild* ready = ReadyBuild(*t, tag.empty() ? "default" : tag);
  if (ready == nullptr && tag.empty()) ready = ReadyBuild(*t, "");
  if (ready != nullptr) co_return *ready;
  const v1::TemplateBuild& last = t->builds(t->builds_size() - 1);
  if (!tag.empty() && ReadyBuild(*t, "") != nullptr) {
    co_return absl::NotFoundError(absl::StrCat("template '", base_name, "' has no ready build tagged '", tag, "'"));
  }
  co_return absl::FailedPreconditionError(
      absl::StrCat("template '", base_name, "' has no ready build: its last is ", StatusName(last.status()),
                   last.error().empty() ? "" : absl::StrCat(" (", DescribeFailure(last).first, ")")));
}

asio::awaitable<absl::Status> E2bTemplates::Start(const v1::SandboxLease& lease, const v1::TemplateBuild& build) {
  auto get = [&](const char* key) {
    auto it = build.annotations().find(key);
    return it == build.annotations().end() ? std::string() : it->second;
  };
  const std::string start = get(kStartCmdAnnotation), ready = get(kReadyCmdAnnotation);
  if (start.empty() && ready.empty()) co_return absl::OkStatus();
  auto host = leases_->Host(lease);
  if (!host.ok()) co_return host.status();
  const std::string workdir = get(kWorkdirAnnotation);
  auto shell = [&](const std::string& script) {
    v1::ExecRequest exec;
    exec.set_sandbox_id(lease.sandbox_id());
    v1::Command* c = exec.mutable_command();
    c->add_argv("/bin/sh");
    c->add_argv("-c");
    c->add_argv(workdir.empty() ? script : absl::StrCat("cd ", ShellQuote(workdir), " && ", script));
    c->set_user(get(kUserAnnotation));
    ToProto(absl::Seconds(30), c->mutable_timeout());
    return exec;
  };
  const absl::Time deadline = clock_->Now() + kReadyWait;
  if (!start.empty()) {  // in the background, for as long as the sandbox lives
    auto started = co_await (*host)->Exec(
        shell(absl::StrCat("nohup sh -c ", ShellQuote(start), " >/tmp/.e2b-start.log 2>&1 </dev/null &")), 4096,
        sandbox::CallOptions{.deadline = deadline});
    if (!started.ok()) co_return started.status();
    if (started->exit.exit_code() != 0) {
      co_return absl::FailedPreconditionError(absl::StrCat("the template's startCmd did not start: ", started->tail));
    }
  }
  while (!ready.empty()) {
    auto probe = co_await (*host)->Exec(shell(ready), 4096, sandbox::CallOptions{.deadline = deadline});
    if (!probe.ok()) co_return probe.status();
    if (probe->exit.exit_code() == 0) break;
    if (clock_->Now() + kReadyPoll >= deadline) {
      co_return absl::UnavailableError(absl::StrCat("the template's readyCmd did not succeed within ",
                                                    absl::FormatDuration(kReadyWait), "; it said: ", probe->tail));
    }
    co_await async::SleepFor(*clock_, kReadyPoll);
  }
  co_return absl::OkStatus();
}

}  // namespace corral::sandbox_api
