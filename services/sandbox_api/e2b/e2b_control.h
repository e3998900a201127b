// E2B's control plane (the REST API the `e2b` SDK calls at E2B_API_URL), served over the scheduler's leased
// sandboxes: a sandbox is a lease (its id the sandbox id, its owner the API key's name), its timeout the lease's
// ttl (at expiry the scheduler deletes it), setTimeout a renewal, kill a release, fork a ForkLease. Answers and
// errors in the shapes the SDK reads: {"code": <HTTP status>, "message"} bodies, so that a missing sandbox
// becomes its SandboxNotFoundError and a bad key its AuthenticationError. Stateless but for the last CPU sample
// of each sandbox getMetrics read: every call asks the scheduler. Thread-safe.
//
//   POST   /v2/sandboxes                  create: {templateID, timeout, metadata, envVars, allow_internet_access}
//                                         (the default template's image may come from a metadata key)
//   GET    /v2/sandboxes                  list (metadata, state, limit, nextToken; X-Next-Token)
//   GET    /sandboxes/{id}                info
//   DELETE /sandboxes/{id}                kill
//   POST   /sandboxes/{id}/timeout        {timeout}
//   POST   /sandboxes/{id}/refreshes      {duration}: a renewal
//   POST   /v2/sandboxes/{id}/connect     {timeout}: 200 running; 201 resumed from a pause
//   POST   /sandboxes/{id}/resume         {timeout} (the older SDKs' resume)
//   POST   /sandboxes/{id}/pause          204; 409 already paused (its processes frozen, its timeout stopped)
//   GET    /sandboxes/{id}/metrics        one sample now, from its cgroup: CPU share since the previous sample
//                                         (or since it started), memory, disk
//   POST   /sandboxes/{id}/fork           {count, timeout}
//   /templates, /v2/templates, /v3/templates: E2bTemplates
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "boost/asio/awaitable.hpp"
#include "boost/json/object.hpp"
#include "libs/api/e2b_auth.h"
#include "libs/core/clock.h"
#include "services/sandbox_api/e2b/e2b_wire.h"
#include "services/sandbox_api/lease_client.h"

namespace corral::sandbox_api {

class E2bTemplates;

class E2bControlPlane {
 public:
  // `on_killed` (may be empty) hears of each sandbox killed or paused here: the in-sandbox API forgets it.
  // `templates` (may be null: a template then names an image) serves the template calls and the templates
  // sandboxes are made from.
  // `on_leased` (may be empty) hears of each lease this answers with after a create, fork or resume: the
  // in-sandbox API keeps it, so that the first command does not ask the scheduler for it again.
  E2bControlPlane(LeaseApi* leases, const api::E2bAuth* auth, Clock* clock, E2bOptions options = {},
                  std::function<void(const std::string&)> on_killed = {},
                  std::function<void(const v1::SandboxLease&)> on_leased = {}, E2bTemplates* templates = nullptr)
      : leases_(leases),
        templates_(templates),
        auth_(auth),
        clock_(clock),
        options_(std::move(options)),
        on_killed_(std::move(on_killed)),
        on_leased_(std::move(on_leased)) {}

  // True for a path of this API (whatever the method).
  static bool Serves(const std::string& path);
  boost::asio::awaitable<E2bAnswer> Handle(E2bRequest request);

 private:
  boost::asio::awaitable<E2bAnswer> Create(std::string owner, std::string body);
  boost::asio::awaitable<E2bAnswer> List(std::string owner, std::map<std::string, std::string> query);
  boost::asio::awaitable<E2bAnswer> OnSandbox(std::string owner, std::string method, std::string id, std::string action,
                                              std::string body);
  boost::asio::awaitable<E2bAnswer> Pause(std::string owner, std::string id);
  // Resumes a paused sandbox (201), or renews a running one when `timeout` > 0 (200).
  boost::asio::awaitable<E2bAnswer> Connect(std::string owner, std::string id, absl::Duration timeout);
  // The lease `id` of `owner` and its host's client, or the E2B error to answer (404, 500).
  struct Leased {
    v1::SandboxLease lease;
    std::shared_ptr<sandbox::HostApi> host;
  };
  boost::asio::awaitable<std::variant<Leased, E2bAnswer>> FindLeased(std::string owner, std::string id);
  // GET /sandboxes/{id}/usage (Corral's): what the sandbox has cost so far, in Daytona's shape (UsageJson).
  boost::asio::awaitable<E2bAnswer> Usage(std::string owner, std::string id);
  // getMetrics: the host's usage samples of the sandbox in [start, end] (query, Unix seconds).
  boost::asio::awaitable<E2bAnswer> Metrics(std::string owner, std::string id,
                                            std::map<std::string, std::string> query);
  // What the SDK reads after create, connect and fork (Sandbox), and for info and list (SandboxDetail).
  boost::json::object SandboxJson(const v1::SandboxLease& lease) const;
  boost::json::object InfoJson(const v1::SandboxLease& lease) const;

  LeaseApi* const leases_;
  E2bTemplates* const templates_;
  const api::E2bAuth* const auth_;
  Clock* const clock_;
  const E2bOptions options_;
  const std::function<void(const std::string&)> on_killed_;
  const std::function<void(const v1::SandboxLease&)> on_leased_;
};

}  // namespace corral::sandbox_api
