// E2B's template API (what `Template.build`, `Template.exists` and the tag calls of the `e2b` SDK send), over the
// scheduler's sandbox templates: a template is the owner's named environment, a build its E2B steps planned into
// setup commands over an image (template_steps.h) and built by whichever host the scheduler places it on. Every
// replica answers every call: the templates, their builds' state and logs, and the COPY uploads live in the
// scheduler. Thread-safe.
//
//   POST   /v3/templates                          request a build: {name ("name:tag"), tags, cpuCount, memoryMB}
//   GET    /templates/{id}/files/{hash}           {present} or {present: false, url}: the upload link (a PUT to
//   PUT    /templates/{id}/files/{hash}/upload    this replica, signed for the key's owner; no API key)
//   POST   /v2/templates/{id}/builds/{buildID}    start it: {fromImage | fromTemplate, steps, startCmd, readyCmd,
//                                                 force}; 202 at once
//   GET    /templates/{id}/builds/{buildID}/status   {status, logEntries from ?logsOffset, reason}
//   GET    /templates/aliases/{alias}             200 {templateID} once a build of it is ready; 404 before
//   GET    /templates/{id}/tags                   the tags of its ready builds
//   DELETE /templates/{id}                        204; 404 {"code": 404}
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "boost/asio/awaitable.hpp"
#include "libs/api/e2b_auth.h"
#include "libs/core/clock.h"
#include "services/sandbox_api/e2b/e2b_wire.h"
#include "services/sandbox_api/lease_client.h"

namespace corral::sandbox_api {

// The environment every E2B sandbox has, template or not: its user's home a task path and the working directory.
void AddE2bDefaults(const E2bOptions& options, v1::EnvironmentSpec* env);

class E2bTemplates {
 public:
  E2bTemplates(TemplateApi* templates, LeaseApi* leases, const api::E2bAuth* auth, Clock* clock,
               E2bOptions options = {})
      : templates_(templates), leases_(leases), auth_(auth), clock_(clock), options_(std::move(options)) {}

  // True for a path of this API (whatever the method).
  static bool Serves(const std::string& path);
  boost::asio::awaitable<E2bAnswer> Handle(E2bRequest request);

  // The ready build a sandbox of `owner` made from `name` ("name", "name:tag" or a template id) uses; nullopt
  // when the owner has no template of that name (it may name an image). NOT_FOUND for a missing tag,
  // FAILED_PRECONDITION for a template with no ready build.
  boost::asio::awaitable<absl::StatusOr<std::optional<v1::TemplateBuild>>> Resolve(std::string owner, std::string name);
  // What a sandbox made from `build` runs first: its startCmd in the background, then its readyCmd until it
  // succeeds (2 minutes at most: UNAVAILABLE after).
  boost::asio::awaitable<absl::Status> Start(const v1::SandboxLease& lease, const v1::TemplateBuild& build);

 private:
  boost::asio::awaitable<E2bAnswer> Request(std::string owner, std::string body);
  boost::asio::awaitable<E2bAnswer> UploadLink(std::string owner, std::string base_url, std::string id,
                                               std::string hash);
  boost::asio::awaitable<E2bAnswer> Upload(std::string hash, std::string token, std::string body);
  boost::asio::awaitable<E2bAnswer> Trigger(std::string owner, std::string id, std::string build_id, std::string body);
  boost::asio::awaitable<E2bAnswer> Status(std::string owner, std::string id, std::string build_id, std::string offset);
  boost::asio::awaitable<E2bAnswer> Alias(std::string owner, std::string alias);
  boost::asio::awaitable<E2bAnswer> Tags(std::string owner, std::string id);
  boost::asio::awaitable<E2bAnswer> Delete(std::string owner, std::string id);
  // The template `id_or_name` names: an id ("tpl-…"), else a name.
  boost::asio::awaitable<absl::StatusOr<v1::SandboxTemplate>> Lookup(const std::string& owner,
                                                                     const std::string& id_or_name);
  // The base a build's steps go on: fromTemplate's ready build, or an image.
  boost::asio::awaitable<absl::StatusOr<v1::TemplateBuild>> Base(const std::string& owner,
                                                                 const boost::json::object& body);

  TemplateApi* const templates_;
  LeaseApi* const leases_;
  const api::E2bAuth* const auth_;
  Clock* const clock_;
  const E2bOptions options_;
};

}  // namespace corral::sandbox_api
