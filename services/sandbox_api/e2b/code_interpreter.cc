#include "services/sandbox_api/e2b/code_interpreter.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/experimental/concurrent_channel.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "libs/http/embedded_files.h"

extern const corral::http::EmbeddedFile kE2bScripts[];

namespace corral::sandbox_api {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;

// A context's turn: held by the run in progress (a channel of one slot; sending takes it, receiving frees it).
using Turn = asio::experimental::concurrent_channel<void(boost::system::error_code)>;

// Frees a turn when the run that took it ends, however it ends.
class TurnHeld {
 public:
  explicit TurnHeld(std::shared_ptr<Turn> turn) : turn_(std::move(turn)) {}
  ~TurnHeld() {
    turn_->try_receive([](boost::system::error_code) {});
  }
  TurnHeld(const TurnHeld&) = delete;
  TurnHeld& operator=(const TurnHeld&) = delete;

 private:
  std::shared_ptr<Turn> turn_;
};

// Ends a kernel alone: SIGTERM to its process group, its stdin closed. (Stopping its call would make the host
// end everything the sandbox runs, the other contexts' kernels too.)
void End(EnvdProcess& process) {
  process.call()->Signal(15);
  process.call()->CloseStdin();
}

std::string KernelScript() {
  const http::EmbeddedFile* file = http::FindEmbedded(kE2bScripts, "code_kernel.py");
  return file == nullptr ? "" : std::string(file->data);
}

bool IsJsonObject(const std::string& line) {
  boost::system::error_code ec;
  json::value v = json::parse(line, ec);
  return !ec && v.is_object();
}

// What a run of the kernel reads on its stdin.
std::string RequestLine(const envd::ExecuteRequest& request) {
  json::object env;
  for (const auto& [key, value] : request.env_vars()) env[key] = value;
  return json::serialize(json::object{{"code", request.code()}, {"env_vars", std::move(env)}}) + "\n";
}

std::string ErrorLine(const std::string& name, const std::string& value) {
  return json::serialize(json::object{{"type", "error"}, {"name", name}, {"value", value}, {"traceback", value}});
}

}  // namespace

struct CodeInterpreter::Kernel {
  envd::CodeContext context;
  std::shared_ptr<EnvdProcess> process;  // its call to the host, and its output
  std::shared_ptr<Turn> turn;
  size_t next = 0;      // the next output event to read (the turn's holder reads)
  std::string partial;  // output after the last whole line
};

CodeInterpreter::~CodeInterpreter() {
  absl::MutexLock lock(&mu_);
  for (const auto& [sandbox, contexts] : kernels_) {
    for (const auto& [id, kernel] : contexts) kernel->process->call()->Stop();
  }
}

size_t CodeInterpreter::kernels() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [sandbox, contexts] : kernels_) n += contexts.size();
  return n;
}

void CodeInterpreter::Forget(const std::string& sandbox_id) {
  absl::MutexLock lock(&mu_);
  auto it = kernels_.find(sandbox_id);
  if (it == kernels_.end()) return;
  for (const auto& [id, kernel] : it->second) kernel->process->call()->Stop();
  kernels_.erase(it);
}

void CodeInterpreter::SweepLocked() {
  for (auto it = kernels_.begin(); it != kernels_.end();) {
    std::erase_if(it->second, [](const auto& kernel) { return kernel.second->process->ended(); });
    it = it->second.empty() ? kernels_.erase(it) : std::next(it);
  }
}

void CodeInterpreter::Drop(const std::string& sandbox_id, Kernel& kernel) {
  End(*kernel.process);
  absl::MutexLock lock(&mu_);
  auto it = kernels_.find(sandbox_id);
  if (it == kernels_.end()) return;
  // Only this kernel: a restart may have put another in its context's place already.
  if (auto k = it->second.find(kernel.context.id()); k != it->second.end() && k->second.get() == &kernel) {
    it->second.erase(k);
  }
  if (it->second.empty()) kernels_.erase(it);
}

absl::StatusOr<std::string> CodeInterpreter::Language(const std::string& language) const {
  if (language.empty() || language == "python" || language == "python3") return std::string("python");
  return absl::InvalidArgumentError(
      absl::StrCat("language '", language, "' is not served: Corral's code interpreter runs python"));
}

asio::awaitable<absl::StatusOr<CodeInterpreter::KernelPtr>> CodeInterpreter::Start(const EnvdSandbox& s,
                                                                                   envd::CodeContext context) {
  v1::ExecRequest start;
  start.set_sandbox_id(s.lease.sandbox_id());
  v1::Command* command = start.mutable_command();
  for (const std::string& arg : {std::string("python3"), std::string("-u"), std::string("-c"), KernelScript()}) {
    command->add_argv(arg);
  }
  command->set_cwd(context.cwd());
  ToProto(absl::Hours(24), command->mutable_timeout());  // cut short by the sandbox's end
  auto kernel = std::make_shared<Kernel>();
  kernel->context = std::move(context);
  kernel->turn = std::make_shared<Turn>(co_await asio::this_coro::executor, 1);
  // code_kernel.py carries itself: where it starts fork-ready, a fork's children keep its globals.
  const std::function<sandbox::ExecObserver()> observed = [&] {  // named, not a temporary in the co_await (GCC 12)
    kernel->process = std::make_shared<EnvdProcess>(clock_, envd::ProcessConfig(), "");
    return EnvdProcess::Observe(kernel->process, {});
  };
  auto call = co_await StartCarriable(s, std::move(start), options_.fork_ready, observed);
  if (!call.ok()) co_return call.status();
  kernel->process->set_call(*call);
  co_return kernel;
}

asio::awaitable<absl::StatusOr<envd::CodeContext>> CodeInterpreter::CreateContext(const EnvdSandbox& s,
                                                                                  envd::CreateContextRequest request) {
  auto language = Language(request.language());
  if (!language.ok()) co_return language.status();
  auto cwd = E2bPath(options_.home, request.cwd().empty() ? options_.home : request.cwd());
  if (!cwd.ok()) co_return cwd.status();
  envd::CodeContext context;
  {
    absl::MutexLock lock(&mu_);
    context.set_id(absl::StrCat("ctx-", absl::Hex(absl::Uniform<uint64_t>(bitgen_), absl::kZeroPad16)));
  }
  context.set_language(*language);
  context.set_cwd(*cwd);
  auto kernel = co_await Start(s, context);
  if (!kernel.ok()) co_return kernel.status();
  absl::MutexLock lock(&mu_);
  SweepLocked();
  kernels_[s.lease.lease_id()][context.id()] = *kernel;
  co_return context;
}

void CodeInterpreter::Remember(const v1::SandboxLease& lease) {
  if (lease.carried_processes().empty()) return;
  absl::MutexLock lock(&mu_);
  carried_[lease.lease_id()] = lease;
}

asio::awaitable<void> CodeInterpreter::TakeUpCarried(const EnvdSandbox& s) {
  v1::SandboxLease child;
  std::map<std::string, KernelPtr> parents;
  {
    absl::MutexLock lock(&mu_);
    auto it = carried_.find(s.lease.lease_id());
    if (it == carried_.end()) co_return;
    child = std::move(it->second);
    carried_.erase(it);
    if (auto p = kernels_.find(child.parent_lease_id()); p != kernels_.end()) parents = p->second;
  }
  for (const auto& [id, parent] : parents) {
    auto copy = child.carried_processes().end();
    if (parent->process->call() != nullptr) {
      copy = std::find_if(child.carried_processes().begin(), child.carried_processes().end(),
                          [&](const auto& c) { return c.second == parent->process->call()->process_id(); });
    }
    if (copy == child.carried_processes().end()) continue;  // not carried: the context starts afresh there
    auto kernel = std::make_shared<Kernel>();
    kernel->context = parent->context;
    kernel->process = std::make_shared<EnvdProcess>(clock_, envd::ProcessConfig(), "");
    kernel->turn = std::make_shared<Turn>(co_await asio::this_coro::executor, 1);
    v1::AttachProcess attach;
    attach.set_sandbox_id(child.sandbox_id());
    attach.set_process_id(copy->first);
    sandbox::ExecObserver observer = EnvdProcess::Observe(kernel->process, {});  // named: GCC 12 and co_await
    auto call = co_await s.host->Attach(std::move(attach), std::move(observer));
    if (!call.ok()) continue;
    kernel->process->set_call(*call);
    absl::MutexLock lock(&mu_);
    kernels_[child.lease_id()].emplace(id, std::move(kernel));
  }
}

std::vector<envd::CodeContext> CodeInterpreter::ListContexts(const EnvdSandbox& s) const {
  absl::MutexLock lock(&mu_);
  std::vector<envd::CodeContext> out;
  auto it = kernels_.find(s.lease.lease_id());
  if (it == kernels_.end()) return out;
  for (const auto& [id, kernel] : it->second) out.push_back(kernel->context);
  return out;
}

absl::Status CodeInterpreter::RemoveContext(const EnvdSandbox& s, const std::string& id) {
  KernelPtr kernel;
  {
    absl::MutexLock lock(&mu_);
    auto it = kernels_.find(s.lease.lease_id());
    if (it == kernels_.end() || !it->second.contains(id)) {
      return absl::NotFoundError(absl::StrCat("context '", id, "' not found (or made through another replica)"));
    }
    kernel = it->second.at(id);
  }
  Drop(s.lease.lease_id(), *kernel);
  return absl::OkStatus();
}

asio::awaitable<absl::Status> CodeInterpreter::RestartContext(const EnvdSandbox& s, std::string id) {
  KernelPtr old;
  {
    absl::MutexLock lock(&mu_);
    auto it = kernels_.find(s.lease.lease_id());
    if (it == kernels_.end() || !it->second.contains(id)) {
      co_return absl::NotFoundError(absl::StrCat("context '", id, "' not found (or made through another replica)"));
    }
    old = it->second.at(id);
  }
  Drop(s.lease.lease_id(), *old);
  auto kernel = co_await Start(s, old->context);
  if (!kernel.ok()) co_return kernel.status();
  absl::MutexLock lock(&mu_);
  kernels_[s.lease.lease_id()][id] = *kernel;
  co_return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<CodeInterpreter::KernelPtr>> CodeInterpreter::Find(const EnvdSandbox& s,
                                                                                  const envd::ExecuteRequest& request) {
  std::string id = request.context_id();
  if (id.empty()) {
    auto language = Language(request.language());
    if (!language.ok()) co_return language.status();
    id = absl::StrCat("default-", *language);
  } else if (!request.language().empty()) {
    co_return absl::InvalidArgumentError("give a context or a language, not both");
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = kernels_.find(s.lease.lease_id());
    if (it != kernels_.end() && it->second.contains(id)) {
      const KernelPtr found = it->second.at(id);
      // A default context whose kernel ended starts again (a made context says so: it lost its state).
      if (!request.context_id().empty() || !found->process->ended()) co_return found;
      it->second.erase(id);
    }
  }
  if (!request.context_id().empty()) {
    co_return absl::NotFoundError(absl::StrCat("context '", id, "' not found (or made through another replica)"));
  }
  envd::CodeContext context;
  context.set_id(id);
  context.set_language("python");
  context.set_cwd(options_.home);
  auto started = co_await Start(s, std::move(context));
  if (!started.ok()) co_return started.status();
  absl::MutexLock lock(&mu_);
  SweepLocked();
  auto [at, inserted] = kernels_[s.lease.lease_id()].emplace(id, *started);
  if (!inserted) End(*(*started)->process);  // another run made it meanwhile: use that one
  co_return at->second;
}

asio::awaitable<absl::Status> CodeInterpreter::Execute(const EnvdSandbox& s, envd::ExecuteRequest request,
                                                       EnvdStream& out) {
  auto kernel = co_await Find(s, request);
  if (!kernel.ok()) co_return kernel.status();
  const KernelPtr k = *kernel;
  auto [taken] = co_await k->turn->async_send(boost::system::error_code(), asio::as_tuple(asio::use_awaitable));
  if (taken) co_return absl::UnavailableError(absl::StrCat("the context's turn was lost: ", taken.message()));
  const TurnHeld held(k->turn);
  absl::Status ran = co_await Run(s, *k, request, out);
  co_return ran;
}

asio::awaitable<absl::Status> CodeInterpreter::Run(const EnvdSandbox& s, Kernel& k, const envd::ExecuteRequest& request,
                                                   EnvdStream& out) {
  if (k.process->ended()) {
    Drop(s.lease.lease_id(), k);
    co_return absl::FailedPreconditionError("the context's kernel has ended: restart it or make another");
  }
  k.process->call()->Write(RequestLine(request));
  bool gone = false;
  absl::Time interrupted = absl::InfiniteFuture();
  while (true) {
    const absl::Time now = clock_->Now();
    if (gone && now >= interrupted + kInterruptGrace) {
      Drop(s.lease.lease_id(), k);
      co_return absl::CancelledError("the reader left and the code ignored the interrupt: its kernel was stopped");
    }
    EnvdProcess::Batch batch =
        co_await k.process->Read(&k.next, gone ? interrupted + kInterruptGrace : now + kKeepalive);
    std::string how;             // how the kernel ended, when it did
    k.process->Release(k.next);  // one reader: what it read is not kept
    for (const envd::ProcessEvent& event : batch.events) {
      if (event.has_data()) k.partial += event.data().stdout();
      if (event.has_end()) how = event.end().has_error() ? event.end().error() : event.end().status();
    }
    bool finished = false, sent = false;
    for (size_t end = k.partial.find('\n'); !finished && end != std::string::npos; end = k.partial.find('\n')) {
      std::string line = k.partial.substr(0, end);
      k.partial.erase(0, end + 1);
      finished = line == kEndOfExecution;
      if (!finished && !gone && IsJsonObject(line)) {
        out.SendJson(std::move(line));
        sent = true;
      }
    }
    if (batch.ended && !finished) {
      Drop(s.lease.lease_id(), k);
      if (!gone) {
        out.SendJson(ErrorLine("KernelDied", absl::StrCat("the context's kernel ended (", how.empty() ? "unknown" : how,
                                                          "); its state is gone: run again")));
        (void)co_await out.Flush();
      }
      co_return absl::OkStatus();
    }
    if (!gone && !sent && !finished) out.SendJson(R"({"type":"keepalive"})");
    if (!gone) {
      const bool flushed = co_await out.Flush();
      gone = !flushed;
      if (gone) {
        interrupted = clock_->Now();
        k.process->call()->Signal(2);  // SIGINT: a KeyboardInterrupt in the code, the context lives on
      }
    }
    if (finished) co_return gone ? absl::CancelledError("the reader left: the run was interrupted") : absl::OkStatus();
  }
}

}  // namespace corral::sandbox_api
