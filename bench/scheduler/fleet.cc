// corral-bench-fleet: many simulated sandbox hosts in one process, for the scheduler's fleet simulation. Each
// host is its own gRPC server on loopback speaking the SandboxHost API with a capacity, a create and an exec
// latency, and a failure rate; sandboxes are bookkeeping only (Exec answers "42"). Writes one host address per
// line to --hosts-file once every host listens, then serves until SIGTERM.
//   corral-bench-fleet --hosts=200 --capacity=64 --create-ms=5 --exec-ms=20 --fail-rate=0 --hosts-file=F
#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "corral/v1/sandbox.grpc.pb.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"

namespace {

using namespace corral;  // NOLINT: a benchmark program

// Runs callbacks after a delay, on one thread (the callback API must never block a gRPC thread).
class Delayer {
 public:
  Delayer() : thread_([this] { Loop(); }) {}
  ~Delayer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void After(std::chrono::milliseconds d, std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push({std::chrono::steady_clock::now() + d, seq_++, std::move(fn)});
    }
    cv_.notify_all();
  }

 private:
  struct Item {
    std::chrono::steady_clock::time_point when;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Item& o) const { return when != o.when ? when > o.when : seq > o.seq; }
  };
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (queue_.empty()) {
        cv_.wait(lock);
        continue;
      }
      if (queue_.top().when > std::chrono::steady_clock::now()) {
        cv_.wait_until(lock, queue_.top().when);
        continue;
      }
      auto fn = queue_.top().fn;
      queue_.pop();
      lock.unlock();
      fn();
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue_;
  uint64_t seq_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

struct Options {
  int capacity = 64;
  int create_ms = 5, exec_ms = 20;
  double fail_rate = 0;
};

class FakeHost final : public v1::SandboxHost::CallbackService {
 public:
  FakeHost(int index, Options o, Delayer* delayer) : index_(index), o_(o), delayer_(delayer), rng_(index) {}

  grpc::ServerUnaryReactor* HostInfo(grpc::CallbackServerContext* ctx, const v1::HostInfoRequest*,
                                     v1::HostInfoResponse* out) override {
    out->set_host_id(absl::StrCat("fake-", index_));
    out->set_capacity(o_.capacity);
    out->set_live(live_.load());
    out->set_free(std::max(0, o_.capacity - live_.load()));
    out->mutable_features()->set_landlock_abi(7);
    out->mutable_features()->set_mount_namespaces(true);
    out->mutable_features()->set_network_namespaces(true);
    out->mutable_max_exec_timeout()->set_seconds(3600);
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

  grpc::ServerUnaryReactor* CreateSandboxes(grpc::CallbackServerContext* ctx, const v1::CreateSandboxesRequest* req,
                                            v1::CreateSandboxesResponse* out) override {
    auto* r = ctx->DefaultReactor();
    if (Fail()) {
      r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "injected failure"));
      return r;
    }
    const int want = std::max<int>(1, static_cast<int>(req->count()));
    int made = 0;
    for (int i = 0; i < want; ++i) {
      int cur = live_.load();
      while (cur < o_.capacity && !live_.compare_exchange_weak(cur, cur + 1)) {
      }
      if (cur >= o_.capacity) break;
      v1::CreatedSandbox* sb = out->add_sandboxes();
      sb->mutable_sandbox()->set_sandbox_id(absl::StrCat("fsb-", index_, "-", next_id_++));
      sb->mutable_sandbox()->set_state(v1::SANDBOX_STATE_READY);
      ++made;
    }
    if (made < want) {
      out->set_rejected(want - made);
      out->set_rejected_reason("capacity");
    }
    delayer_->After(std::chrono::milliseconds(o_.create_ms), [r] { r->Finish(grpc::Status::OK); });
    return r;
  }

  grpc::ServerUnaryReactor* DeleteSandbox(grpc::CallbackServerContext* ctx, const v1::DeleteSandboxRequest*,
                                          v1::DeleteSandboxResponse* out) override {
    --live_;
    out->set_existed(true);
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

  grpc::ServerUnaryReactor* GetSandbox(grpc::CallbackServerContext* ctx, const v1::GetSandboxRequest* req,
                                       v1::Sandbox* out) override {
    out->set_sandbox_id(req->sandbox_id());
    out->set_state(v1::SANDBOX_STATE_READY);
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

  grpc::ServerUnaryReactor* ListSandboxes(grpc::CallbackServerContext* ctx, const v1::ListSandboxesRequest*,
                                          v1::ListSandboxesResponse*) override {
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

  grpc::ServerUnaryReactor* PrepareTemplate(grpc::CallbackServerContext* ctx, const v1::PrepareTemplateRequest* req,
                                            v1::Template* out) override {
    out->set_key(req->key());
    out->set_state(v1::TEMPLATE_STATE_READY);
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

  // Exec: started, "42\n" on stdout, exited 0, after the exec latency.
  class ExecReactor final : public grpc::ServerWriteReactor<v1::ExecEvent> {
   public:
    ExecReactor(Delayer* d, int ms, bool fail) {
      if (fail) {
        Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "injected failure"));
        return;
      }
      events_.resize(3);
      events_[0].mutable_started()->set_pid(1);
      events_[1].set_stdout("42\n");
      events_[2].mutable_exited()->set_exit_code(0);
      d->After(std::chrono::milliseconds(ms), [this] { StartWrite(&events_[0]); });
    }
    void OnWriteDone(bool ok) override {
      if (!ok || ++next_ == events_.size()) {
        Finish(grpc::Status::OK);
        return;
      }
      StartWrite(&events_[next_]);
    }
    void OnDone() override { delete this; }

   private:
    std::vector<v1::ExecEvent> events_;
    size_t next_ = 0;
  };
  grpc::ServerWriteReactor<v1::ExecEvent>* Exec(grpc::CallbackServerContext*, const v1::ExecRequest*) override {
    return new ExecReactor(delayer_, o_.exec_ms, Fail());
  }

  class WriteReactor final : public grpc::ServerReadReactor<v1::WriteFileRequest> {
   public:
    WriteReactor() { StartRead(&req_); }
    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::OK);
        return;
      }
      StartRead(&req_);
    }
    void OnDone() override { delete this; }

   private:
    v1::WriteFileRequest req_;
  };
  grpc::ServerReadReactor<v1::WriteFileRequest>* WriteFile(grpc::CallbackServerContext*, v1::FileInfo*) override {
    return new WriteReactor();
  }

 private:
  bool Fail() {
    if (o_.fail_rate <= 0) return false;
    std::lock_guard<std::mutex> lock(rng_mu_);
    return std::uniform_real_distribution<double>(0, 1)(rng_) < o_.fail_rate;
  }
  const int index_;
  const Options o_;
  Delayer* const delayer_;
  std::atomic<int> live_{0};
  std::atomic<uint64_t> next_id_{0};
  std::mutex rng_mu_;
  std::mt19937_64 rng_;
};

std::string Arg(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--" + name + "=", 0) == 0) return a.substr(name.size() + 3);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  const int n = std::stoi(Arg(argc, argv, "hosts", "200"));
  Options o;
  o.capacity = std::stoi(Arg(argc, argv, "capacity", "64"));
  o.create_ms = std::stoi(Arg(argc, argv, "create-ms", "5"));
  o.exec_ms = std::stoi(Arg(argc, argv, "exec-ms", "20"));
  o.fail_rate = std::stod(Arg(argc, argv, "fail-rate", "0"));
  const std::string hosts_file = Arg(argc, argv, "hosts-file", "fleet-hosts.txt");
  Delayer delayer;
  std::vector<std::unique_ptr<FakeHost>> hosts;
  std::vector<std::unique_ptr<grpc::Server>> servers;
  std::string listing;
  for (int i = 0; i < n; ++i) {
    hosts.push_back(std::make_unique<FakeHost>(i, o, &delayer));
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(hosts.back().get());
    servers.push_back(builder.BuildAndStart());
    if (!servers.back() || port == 0) {
      fprintf(stderr, "host %d could not listen\n", i);
      return 1;
    }
    absl::StrAppend(&listing, "127.0.0.1:", port, "\n");
  }
  {
    std::ofstream tmp(hosts_file + ".tmp");
    tmp << listing;
  }
  std::rename((hosts_file + ".tmp").c_str(), hosts_file.c_str());
  fprintf(stderr, "fleet: %d hosts, capacity %d each, create %d ms, exec %d ms, failure rate %.3f\n", n, o.capacity,
          o.create_ms, o.exec_ms, o.fail_rate);
  int sig = 0;
  sigwait(&signals, &sig);
  for (auto& s : servers) s->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}
