#include "services/scheduler/episode/resident_process.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "libs/api/proto_time.h"
#include "libs/http/embedded_files.h"
#include "openssl/rand.h"
#include "services/scheduler/episode/attempt.h"
#include "spdlog/spdlog.h"

extern const corral::http::EmbeddedFile kEpisodeScripts[];

namespace corral::scheduler {

namespace asio = boost::asio;

asio::awaitable<std::variant<ResidentProcesses::Entry, Failure>> StartResident(Attempt& a, const ResidentSpec& spec) {
  using Out = std::variant<ResidentProcesses::Entry, Failure>;
  v1::ExecRequest start;
  start.set_sandbox_id(a.sandbox_id);
  v1::Command& command = *start.mutable_command();
  if (!spec.stderr_log.empty()) {
    const absl::Time deadline = a.EpisodeDeadline();
    const size_t slash = spec.stderr_log.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : spec.stderr_log.substr(0, slash);
    if (!dir.empty()) {
      if (absl::Status s = co_await a.slot->client->MakeDir(a.sandbox_id, dir, a.Call(deadline)); !s.ok()) {
        co_return Out(a.FromStatus(s, spec.phase, v1::FAILURE_CLASS_INFRA, absl::StrCat("making ", dir)));
      }
    }
    const std::string log = a.InSandbox(spec.stderr_log);
    for (const char* arg : {"sh", "-c", "exec \"$@\" 2>>\"$0\"", log.c_str()}) command.add_argv(arg);
  }
  for (const auto& arg : spec.command.argv()) command.add_argv(arg);
  *command.mutable_env() = spec.command.env();
  command.set_cwd(spec.command.cwd().empty() ? a.workdir : spec.command.cwd());
  command.set_fork_ready(spec.command.fork_ready());
  // Its life is the episode's (as far as the host allows): it is stopped with the attempt.
  const absl::Duration life = std::min(a.EpisodeDeadline() - a.clock->Now(), a.slot->max_exec_timeout);
  ToProto(std::max(life, absl::Seconds(1)), command.mutable_timeout());
  const bool fork_ready = command.fork_ready();
  auto started = co_await a.slot->client->StartInteractive(start, {});
  if (!started.ok() && fork_ready && started.status().code() == absl::StatusCode::kFailedPrecondition) {
    // A host that cannot carry it: a fork restarts it instead.
    spdlog::warn("episode {}: {} starts afresh at each fork: {}", a.ticket.ids.episode_id(), spec.what,
                 std::string(started.status().message()));
    start.mutable_command()->set_fork_ready(false);
    started = co_await a.slot->client->StartInteractive(std::move(start), {});
  }
  if (!started.ok()) {
    const absl::StatusCode code = started.status().code();
    if (!spec.cannot_start.empty() &&
        (code == absl::StatusCode::kNotFound || code == absl::StatusCode::kInvalidArgument)) {
      co_return Out(Failure{v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_ENVIRONMENT, spec.phase,
                            absl::StrCat(spec.cannot_start, started.status().message())});
    }
    co_return Out(
        a.FromStatus(started.status(), spec.phase, v1::FAILURE_CLASS_INFRA, absl::StrCat("starting ", spec.what)));
  }
  ResidentProcesses::Entry entry{*std::move(started), spec.marker, fork_ready && start.command().fork_ready()};
  a.residents.Put(spec.key, entry);
  co_return Out(std::move(entry));
}

std::string RandomMarker(const std::string& prefix) {
  unsigned char raw[12];
  RAND_bytes(raw, sizeof raw);
  std::string hex;
  for (unsigned char c : raw) absl::StrAppend(&hex, absl::Hex(c, absl::kZeroPad2));
  return absl::StrCat(prefix, hex, "__");
}

std::string EpisodeScript(const std::string& name) {
  const http::EmbeddedFile* file = http::FindEmbedded(kEpisodeScripts, name);
  return file == nullptr ? "" : std::string(file->data);
}

v1::Command RelayCommand(const std::string& script, const v1::Command& server, uint32_t port,
                         const std::string& unix_socket, const std::string& log, boost::json::object extra) {
  namespace json = boost::json;
  json::object cfg = std::move(extra);
  json::array argv;
  for (const auto& arg : server.argv()) argv.emplace_back(arg);
  cfg["argv"] = std::move(argv);
  json::object env;
  for (const auto& [k, v] : server.env()) env[k] = v;
  cfg["env"] = std::move(env);
  cfg["cwd"] = server.cwd();
  cfg["port"] = port;
  cfg["socket"] = port != 0 ? "" : unix_socket;
  cfg["log"] = log;
  v1::Command relay;
  for (const char* arg : {"python3", "-u", "-c"}) relay.add_argv(arg);
  relay.add_argv(absl::StrCat(EpisodeScript("sandbox_server.py"), "\n", EpisodeScript(script)));
  (*relay.mutable_env())["__CORRAL_RELAY"] = json::serialize(cfg);
  relay.set_cwd(server.cwd());
  return relay;
}

std::string UnderHome(const std::string& home, const std::string& path) {
  if (path.empty() || path.front() == '/' || home.empty()) return path;
  return absl::StrCat(absl::StripSuffix(home, "/"), "/", path);
}

}  // namespace corral::scheduler
