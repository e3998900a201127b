// E2B's in-sandbox API (envd) for every sandbox of the cluster, at one endpoint (the SDK's E2B_SANDBOX_URL): each
// request names its sandbox in the E2b-Sandbox-Id header and presents that sandbox's access token
// (X-Access-Token). An adapter over the lease's host:
//   Connect RPC, JSON codec:  /process.Process/{Start,Connect,List,SendInput,CloseStdin,SendSignal}
//                             /filesystem.Filesystem/{Stat,ListDir,MakeDir,Move,Remove,WatchDir}
//   REST:                     GET|POST /files (download, multipart or octet-stream upload), GET /health
// Paths are E2B's: /home/user is the sandbox user's home (a task path of every E2B sandbox), relative paths are
// under it, and /tmp is the sandbox's own. Commands run as that one user.
// A process lives in the replica whose Start began it (the call to its host holds its stdin): SendInput,
// CloseStdin, SendSignal and Connect must reach that replica, so several replicas need routing by
// E2b-Sandbox-Id (sticky). Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/awaitable.hpp"
#include "boost/json/object.hpp"
#include "libs/api/e2b_auth.h"
#include "libs/core/clock.h"
#include "libs/http/server.h"
#include "services/sandbox_api/e2b/e2b_control.h"
#include "services/sandbox_api/e2b/envd_processes.h"
#include "services/sandbox_api/lease_client.h"

namespace corral::sandbox_api {

class Envd {
 public:
  // `processes` (may be null) counts the processes running through this replica.
  Envd(LeaseApi* leases, const api::E2bAuth* auth, Clock* clock, E2bOptions options = {},
       prometheus::Gauge* processes = nullptr)
      : leases_(leases),
        auth_(auth),
        clock_(clock),
        options_(std::move(options)),
        processes_(std::make_shared<EnvdProcesses>(processes)) {}

  // True for a request to a sandbox's envd (it names one in E2b-Sandbox-Id).
  static bool Serves(const http::Request& request);
  // Answers through `responder` (streams for Start, Connect and WatchDir); returns the route for metrics.
  boost::asio::awaitable<std::string> Handle(http::Request& request, http::Responder& responder);

  // Ends the processes started here.
  ~Envd();

  size_t processes() const { return processes_->size(); }
  // Drops what this replica remembers of a sandbox's lease (it was killed here).
  void Forget(const std::string& sandbox_id);

 private:
  struct Target {
    v1::SandboxLease lease;
    std::shared_ptr<sandbox::HostApi> host;
  };
  // The sandbox named by the request, its access token checked: from the lease looked up within the last 10 s,
  // or (`fresh`) asked of the scheduler now.
  boost::asio::awaitable<absl::StatusOr<Target>> Resolve(const http::Request& request, bool fresh = false);
  // An E2B path as the host's sandbox path (relative ones under the home); INVALID_ARGUMENT for an empty one.
  absl::StatusOr<std::string> HostPath(absl::string_view path) const;

  // Unary Connect calls: the answer's JSON, or an error.
  boost::asio::awaitable<absl::StatusOr<boost::json::object>> Unary(const std::string& method, const Target& t,
                                                                    const boost::json::object& body);
  // envd_files.cc: filesystem.Filesystem's unary calls.
  boost::asio::awaitable<absl::StatusOr<boost::json::object>> Filesystem(const std::string& method, const Target& t,
                                                                         const boost::json::object& body);
  // Every entry under `root`, `depth` levels down (1: its own entries), as (path, info); the root's own error.
  using Walked = std::vector<std::pair<std::string, v1::FileInfo>>;
  boost::asio::awaitable<absl::StatusOr<Walked>> Walk(const Target& t, std::string root, int depth);
  boost::asio::awaitable<absl::StatusOr<boost::json::object>> Stat(const Target& t, std::string path);
  boost::asio::awaitable<absl::StatusOr<boost::json::object>> ListDir(const Target& t, std::string path, int depth);
  boost::asio::awaitable<absl::StatusOr<boost::json::object>> MakeDir(const Target& t, std::string path);
  boost::asio::awaitable<absl::StatusOr<boost::json::object>> Move(const Target& t, std::string from, std::string to);
  absl::StatusOr<std::shared_ptr<EnvdProcess>> Selected(const Target& t, const boost::json::object& body) const;

  // Streams (WatchDir in envd_files.cc).
  boost::asio::awaitable<void> Start(Target t, boost::json::object body, absl::Duration timeout,
                                     http::Responder& responder);
  boost::asio::awaitable<void> Connect(Target t, boost::json::object body, http::Responder& responder);
  boost::asio::awaitable<void> Follow(std::shared_ptr<EnvdProcess> process, size_t next, http::Responder& responder);
  boost::asio::awaitable<void> WatchDir(Target t, boost::json::object body, absl::Duration timeout,
                                        http::Responder& responder);

  // /files (envd_files.cc).
  boost::asio::awaitable<void> Download(Target t, std::string path, http::Responder& responder);
  boost::asio::awaitable<void> Upload(Target t, std::string path, const http::Request& request,
                                      http::Responder& responder);

  LeaseApi* const leases_;
  const api::E2bAuth* const auth_;
  Clock* const clock_;
  const E2bOptions options_;
  const std::shared_ptr<EnvdProcesses> processes_;
  absl::Mutex mu_;
  std::map<std::string, std::pair<Target, absl::Time>> resolved_ ABSL_GUARDED_BY(mu_);  // with when it was
};

}  // namespace corral::sandbox_api
