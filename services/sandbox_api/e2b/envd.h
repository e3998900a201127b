// E2B's in-sandbox API (envd) for every sandbox of the cluster: the core, over envd's own messages
// (proto/corral/envd). A call names a sandbox opened with Open (its lease, checked against its owner, and its
// host's client) and answers a response or an error; a server stream sends its events to a sink and returns how
// it ended. The HTTP side — routes, Connect framing, headers, keys — is envd_http.h.
// Paths are E2B's: /home/user is the sandbox user's home (a task path of every E2B sandbox), relative paths are
// under it, and /tmp is the sandbox's own. Commands run as that one user.
// A process lives in the replica whose Start began it (the call to its host holds its stdin): SendInput,
// CloseStdin, SendSignal and Connect must reach that replica, so several replicas need routing by sandbox id
// (sticky). Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/awaitable.hpp"
#include "corral/envd/filesystem.pb.h"
#include "corral/envd/process.pb.h"
#include "libs/core/clock.h"
#include "services/sandbox_api/e2b/e2b_wire.h"
#include "services/sandbox_api/e2b/envd_processes.h"
#include "services/sandbox_api/lease_client.h"

namespace corral::sandbox_api {

// A sandbox as envd's calls reach it.
struct EnvdSandbox {
  v1::SandboxLease lease;
  std::shared_ptr<sandbox::HostApi> host;
  // Who the call names (EnvdUser): commands run as it (Command.user).
  std::string user;
};

// The user an E2B call names, as Command.user takes it: "" for none or "user" (the E2B name of a sandbox's
// own user), else the name as given.
std::string EnvdUser(absl::string_view name);
// PERMISSION_DENIED, saying why, for a user `s` does not serve: a sandbox on the host's filesystem has only its
// own user; one made from an image runs commands as root or any user it defines (the host checks which), and
// reads and writes files (`files`) as its own user or "root" (both its user's: a file written as root in an image
// whose user is not root belongs to that user).
absl::Status CheckEnvdUser(const EnvdSandbox& s, bool files);

// `json` as `message` (protobuf's JSON mapping, unknown fields ignored as connect-go does; "" is {});
// INVALID_ARGUMENT naming what is wrong.
absl::Status FromEnvdJson(const std::string& json, google::protobuf::Message* message);
// `message` in protobuf's JSON mapping, as connect-go writes it (field names in lowerCamelCase, defaults left out).
std::string ToEnvdJson(const google::protobuf::Message& message);

// Where a stream's events go, each a JSON text (framed by the adapter: Connect envelopes, NDJSON lines): Send
// keeps one, Flush writes those kept (false: the reader is gone, the stream ends).
class EnvdStream {
 public:
  virtual ~EnvdStream() = default;
  virtual void SendJson(std::string json) = 0;
  void Send(const google::protobuf::Message& event) { SendJson(ToEnvdJson(event)); }
  virtual boost::asio::awaitable<bool> Flush() = 0;
};

// Starts `start` on `s`'s host: fork-ready when `fork_ready` and the sandbox is on the host's filesystem (a fork
// of it then takes the process into every child, running, with its memory), else, or where the host refuses
// that (FAILED_PRECONDITION), as any process. `observed` makes each try's observer (a refused try's has heard its
// end).
boost::asio::awaitable<absl::StatusOr<std::shared_ptr<sandbox::InteractiveProcess>>> StartCarriable(
    const EnvdSandbox& s, v1::ExecRequest start, bool fork_ready,
    const std::function<sandbox::ExecObserver()>& observed);

// An E2B path as the host's sandbox path: absolute ones as they are, "~" and relative ones under `home`;
// INVALID_ARGUMENT for an empty one.
absl::StatusOr<std::string> E2bPath(absl::string_view home, absl::string_view path);

// A file to write (/files upload): its E2B path and bytes.
struct EnvdFile {
  std::string path;
  std::string data;
};

class Envd {
 public:
  // How often a quiet stream (a process's output, a directory watch) sends a keepalive.
  static constexpr absl::Duration kKeepalive = absl::Seconds(30);

  // `processes` (may be null) counts the processes running through this replica.
  Envd(LeaseApi* leases, Clock* clock, E2bOptions options = {}, prometheus::Gauge* processes = nullptr)
      : leases_(leases),
        clock_(clock),
        options_(std::move(options)),
        processes_(std::make_shared<EnvdProcesses>(processes)) {}
  // Ends the processes started here.
  ~Envd();

  // Sandbox `id` of `owner`: from its lease looked up within the last 10 s, or (`fresh`) asked of the scheduler
  // now. UNAVAILABLE when it is not running (killed, timed out, another owner's), or the host's channel error.
  // UNAVAILABLE is what the SDK reads as "not running", so a scheduler that cannot be reached (after its channel's
  // own retries) is INTERNAL ("retry") instead. A host restarting is not either: the call waits up to 5 s for
  // this replica's channel to it to connect again (LeaseApi::AwaitHost).
  boost::asio::awaitable<absl::StatusOr<EnvdSandbox>> Open(std::string id, std::string owner, bool fresh = false);
  // Drops what this replica remembers of a sandbox's lease (it was killed here).
  void Forget(const std::string& sandbox_id);
  // Keeps `lease` as Open would after asking the scheduler (this replica just made, forked or resumed it). A
  // fork's child: the parent's processes carried into it are listed there from its next call on.
  void Remember(const v1::SandboxLease& lease);
  size_t processes() const { return processes_->size(); }

  // process.Process. Start runs for at most `timeout` (then the host kills it); Connect follows for at most
  // `timeout` (the process lives on).
  boost::asio::awaitable<absl::Status> Start(const EnvdSandbox& s, envd::StartRequest request, absl::Duration timeout,
                                             EnvdStream& out);
  boost::asio::awaitable<absl::Status> Connect(const EnvdSandbox& s, envd::ConnectRequest request,
                                               absl::Duration timeout, EnvdStream& out);
  boost::asio::awaitable<absl::StatusOr<envd::ListResponse>> List(const EnvdSandbox& s, envd::ListRequest request);
  boost::asio::awaitable<absl::StatusOr<envd::SendInputResponse>> SendInput(const EnvdSandbox& s,
                                                                            envd::SendInputRequest request);
  boost::asio::awaitable<absl::StatusOr<envd::CloseStdinResponse>> CloseStdin(const EnvdSandbox& s,
                                                                              envd::CloseStdinRequest request);
  boost::asio::awaitable<absl::StatusOr<envd::SendSignalResponse>> SendSignal(const EnvdSandbox& s,
                                                                              envd::SendSignalRequest request);
  boost::asio::awaitable<absl::StatusOr<envd::UpdateResponse>> Update(const EnvdSandbox& s,
                                                                      envd::UpdateRequest request);

  // filesystem.Filesystem (envd_files.cc). WatchDir polls the directory and runs for at most `timeout`.
  boost::asio::awaitable<absl::StatusOr<envd::StatResponse>> Stat(const EnvdSandbox& s, envd::StatRequest request);
  boost::asio::awaitable<absl::StatusOr<envd::ListDirResponse>> ListDir(const EnvdSandbox& s,
                                                                        envd::ListDirRequest request);
  boost::asio::awaitable<absl::StatusOr<envd::MakeDirResponse>> MakeDir(const EnvdSandbox& s,
                                                                        envd::MakeDirRequest request);
  boost::asio::awaitable<absl::StatusOr<envd::MoveResponse>> Move(const EnvdSandbox& s, envd::MoveRequest request);
  boost::asio::awaitable<absl::StatusOr<envd::RemoveResponse>> Remove(const EnvdSandbox& s,
                                                                      envd::RemoveRequest request);
  boost::asio::awaitable<absl::Status> WatchDir(const EnvdSandbox& s, envd::WatchDirRequest request,
                                                absl::Duration timeout, EnvdStream& out);

  // /files (envd_files.cc): a file's bytes (NOT_FOUND when there is none); files written, each an entry with
  // its name, path and size (INVALID_ARGUMENT, and nothing written, for a file without a path or one given twice).
  boost::asio::awaitable<absl::StatusOr<std::string>> Download(const EnvdSandbox& s, std::string path);
  boost::asio::awaitable<absl::StatusOr<std::vector<envd::EntryInfo>>> Upload(const EnvdSandbox& s,
                                                                              std::vector<EnvdFile> files);

 private:
  absl::StatusOr<std::string> HostPath(absl::string_view path) const { return E2bPath(options_.home, path); }
  absl::StatusOr<std::shared_ptr<EnvdProcess>> Selected(const EnvdSandbox& s,
                                                        const envd::ProcessSelector& selector) const;
  // A process's events from index `next` on, each a `Response` (Start's or Connect's), until it ends or `until`:
  // keepalives while it is quiet.
  template <typename Response>
  boost::asio::awaitable<absl::Status> Follow(std::shared_ptr<EnvdProcess> process, size_t next, absl::Time until,
                                              EnvdStream& out);
  // The processes a fork carried into `s` that its parent had started here, as its own (with the parent's
  // process's command and tag): Connect, List and the rest find them from then on.
  boost::asio::awaitable<void> TakeUpCarried(const EnvdSandbox& s);
  // Open without waiting for the host's channel.
  boost::asio::awaitable<absl::StatusOr<EnvdSandbox>> OpenLease(std::string id, std::string owner, bool fresh);
  // The scheduler's answer for the lease; INTERNAL when the scheduler cannot be reached (see Open).
  boost::asio::awaitable<absl::StatusOr<v1::SandboxLease>> AskLease(const std::string& id, const std::string& owner);
  // A host call's NOT_FOUND for the sandbox itself: the lease is gone, forget it.
  void ForgetIfGone(const EnvdSandbox& s, const absl::Status& status);
  // Every entry under `root`, `depth` levels down (1: its own entries), as (path, info); the root's own error.
  using Walked = std::vector<std::pair<std::string, v1::FileInfo>>;
  boost::asio::awaitable<absl::StatusOr<Walked>> Walk(const EnvdSandbox& s, std::string root, int depth);
  boost::asio::awaitable<absl::StatusOr<envd::EntryInfo>> StatPath(const EnvdSandbox& s, std::string path);

  LeaseApi* const leases_;
  Clock* const clock_;
  const E2bOptions options_;
  const std::shared_ptr<EnvdProcesses> processes_;
  absl::Mutex mu_;
  std::map<std::string, std::pair<EnvdSandbox, absl::Time>> opened_ ABSL_GUARDED_BY(mu_);  // with when
  std::map<std::string, v1::SandboxLease> carried_ ABSL_GUARDED_BY(mu_);  // children yet to take theirs up
};

// A Connect call of envd, from its JSON message: a unary one answers its response's JSON; a server stream sends
// its events to `out` and returns how it ended.
using EnvdUnary = boost::asio::awaitable<absl::StatusOr<std::string>> (*)(Envd& envd, const EnvdSandbox& s,
                                                                          const std::string& json);
using EnvdServerStream = boost::asio::awaitable<absl::Status> (*)(Envd& envd, const EnvdSandbox& s,
                                                                  const std::string& json, absl::Duration timeout,
                                                                  EnvdStream& out);

// A unary call of the core, from and to JSON.
template <typename Request, typename Response,
          boost::asio::awaitable<absl::StatusOr<Response>> (Envd::*Call)(const EnvdSandbox&, Request)>
boost::asio::awaitable<absl::StatusOr<std::string>> UnaryJson(Envd& envd, const EnvdSandbox& s,
                                                              const std::string& json) {
  Request request;
  if (absl::Status parsed = FromEnvdJson(json, &request); !parsed.ok()) co_return parsed;
  absl::StatusOr<Response> answer = co_await (envd.*Call)(s, std::move(request));
  if (!answer.ok()) co_return answer.status();
  co_return ToEnvdJson(*answer);
}

// A server stream of the core, from JSON.
template <typename Request,
          boost::asio::awaitable<absl::Status> (Envd::*Call)(const EnvdSandbox&, Request, absl::Duration, EnvdStream&)>
boost::asio::awaitable<absl::Status> StreamJson(Envd& envd, const EnvdSandbox& s, const std::string& json,
                                                absl::Duration timeout, EnvdStream& out) {
  Request request;
  if (absl::Status parsed = FromEnvdJson(json, &request); !parsed.ok()) co_return parsed;
  absl::Status ended = co_await (envd.*Call)(s, std::move(request), timeout, out);
  co_return ended;
}

}  // namespace corral::sandbox_api
