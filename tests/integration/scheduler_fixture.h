// The scheduler integration fixture: a whole cluster of real processes on loopback — corral-fake-llm (the
// arithmetic mode), corral-proxy, corral-ratelimiter, sandbox hosts (root; each with a uid block of its own) and
// corral-scheduler — with helpers to submit batches, stream results and check that nothing leaked.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "corral/v1/proxy.grpc.pb.h"
#include "corral/v1/sandbox.grpc.pb.h"
#include "corral/v1/scheduler.grpc.pb.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "libs/core/token.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/channel.h"
#include "libs/rpc/status_conversion.h"
#include "services/sandbox_host/linux/process_sweep.h"
#include "tests/support/subprocess.h"
#include "tests/support/uid_range.h"
#include "tools/fake-llm/fake_model.h"

namespace corral {

// What corral-fake-llm --arithmetic answers for an episode's sampling seed: wrong by one for one seed in four.
inline bool ModelIsWrong(uint64_t episode_seed) {
  const std::string two = "2";
  auto plan = fakellm::PlanArithmetic("1 + 1", "", &two, static_cast<int64_t>(episode_seed & 0x7fffffffffffffffULL));
  return plan->reply != "The answer is 2.";
}

// "What is a + b?" for `runner`, answered by the fake model (wrong for one sampling seed in four: seed_sampling
// is on). The agent runner's agent asks the model once through the proxy and writes the answer; its verifier
// checks it.
inline v1::Task Arithmetic(const std::string& id, int a, int b, v1::Runner runner) {
  v1::Task t;
  t.set_id(id);
  t.set_prompt(absl::StrCat("What is ", a, " + ", b, "?"));
  t.set_answer(absl::StrCat(a + b));
  t.set_runner(runner);
  t.mutable_llm()->set_seed_sampling(true);
  switch (runner) {
    case v1::RUNNER_TOOL_LOOP: {
      t.mutable_reward()->set_function(v1::REWARD_FUNCTION_NUMERIC);
      v1::ToolSpec* tool = t.mutable_tool_loop()->add_tools();
      tool->set_name("python");
      tool->set_kind(v1::TOOL_KIND_CODE_INTERPRETER);
      break;
    }
    case v1::RUNNER_AGENT:
      // The agent asks the model once (no tools), writes the answer; the verifier checks it.
      for (const char* arg :
           {"python3", "-c",
            "import json,os,urllib.request\n"
            "b,k=os.environ['OPENAI_BASE_URL'],os.environ['OPENAI_API_KEY']\n"
            "p=open(os.environ['CORRAL_INSTRUCTION_FILE']).read()\n"  // absolute, opened from /workspace
            "assert p==os.environ['CORRAL_INSTRUCTION'],'CORRAL_INSTRUCTION differs from the file'\n"
            "r=urllib.request.Request(b+'/chat/"
            "completions',method='POST',data=json.dumps({'model':os.environ['OPENAI_MODEL'],"
            "'messages':[{'role':'user','content':p}]}).encode(),headers={'Authorization':'Bearer "
            "'+k,'Content-Type':'application/json'})\n"
            "m=json.load(urllib.request.urlopen(r,timeout=60))['choices'][0]['message']['content']\n"
            "open('/workspace/answer.txt','w').write(m.split('####')[-1].strip())\n"}) {
        t.mutable_agent()->mutable_command()->add_argv(arg);
      }
      for (const char* arg : {"sh", "-c",
                              "mkdir -p /logs/verifier; a=$(cat /workspace/answer.txt); "
                              "e=$(python3 -c \"import "
                              "json,os;print(json.load(open(os.environ['HOME']+'/.corral/task.json'))['answer'])\"); "
                              "if [ \"$a\" = \"$e\" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt"}) {
        t.mutable_verifier()->mutable_command()->add_argv(arg);
      }
      break;
    default: t.mutable_reward()->set_function(v1::REWARD_FUNCTION_GSM8K);
  }
  return t;
}

class SchedulerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the sandbox hosts need root";
    dir_ = testing::MakeTestDir();
    secret_ = testing::WriteSecretFile(dir_);
    token_ = MintClusterToken(*TokenSigner::FromKeyFile(secret_));
  }
  void TearDown() override {
    scheduler_stub_.reset();
    if (scheduler_) Stop(*scheduler_);
    for (auto& h : hosts_) {
      if (h.service) Stop(*h.service);
      KillUids(h.uids->first(), h.uids->last());  // what a host killed -9 left running
      std::filesystem::remove_all(h.root);
    }
    for (auto* s : {&proxy_, &limiter_, &fake_llm_}) {
      if (*s) Stop(**s);
    }
  }
  // pids of the live processes (zombies run nothing) of a uid in [first, last].
  static std::vector<pid_t> RunningAs(uid_t first, uid_t last) {
    std::vector<pid_t> pids;
    sandbox::ForEachLiveProcess([&](pid_t pid, const std::vector<uid_t>& uids) {
      if (std::any_of(uids.begin(), uids.end(), [&](uid_t u) { return u >= first && u <= last; })) pids.push_back(pid);
    });
    return pids;
  }
  static void KillUids(uid_t first, uid_t last) {
    for (pid_t pid : RunningAs(first, last)) kill(pid, SIGKILL);
  }
  static void Stop(testing::RunningService& s) {
    s.process.Signal(SIGTERM);
    if (!s.process.Wait(absl::Seconds(30)).ok()) {
      s.process.Signal(SIGKILL);
      (void)s.process.Wait(absl::Seconds(10));
    }
  }

  // fake-llm, proxy, limiter and `hosts` sandbox hosts of `capacity` each, then the scheduler.
  void StartCluster(int hosts = 1, int capacity = 16, std::vector<std::string> scheduler_args = {}) {
    std::vector<std::string> llm_args = fake_llm_args_;
    llm_args.push_back("--listen=127.0.0.1:0");
    auto llm = testing::StartService(CORRAL_FAKE_LLM, llm_args, dir_, "fake-llm");
    ASSERT_THAT(llm, IsOk());
    fake_llm_.emplace(*std::move(llm));
    ASSERT_NO_FATAL_FAILURE(StartProxy("127.0.0.1:0", "127.0.0.1:0"));
    std::ofstream(dir_ + "/limiter.yaml")
        << "limits:\n  - name: code_exec/{language}\n    kind: concurrency\n    permits: " << code_exec_permits_
        << "\n"
           "  - name: llm/{model}\n    kind: concurrency\n    permits: 2\n"
        << "state_path: " << dir_ << "/limiter.db\n";
    ASSERT_NO_FATAL_FAILURE(StartLimiter("127.0.0.1:0"));
    for (int i = 0; i < hosts; ++i) ASSERT_NO_FATAL_FAILURE(StartHost(capacity));
    scheduler_args_ = std::move(scheduler_args);
    ASSERT_NO_FATAL_FAILURE(StartScheduler());
  }

  // (Re)starts the proxy; a restart passes the addresses it had, so the scheduler finds it again.
  void StartProxy(const std::string& grpc, const std::string& http) {
    auto proxy = testing::StartService(
        CORRAL_PROXY,
        {"--secret-file=" + secret_, "--grpc-listen=" + grpc, "--metrics-listen=127.0.0.1:0", "--http-listen=" + http,
         "--journal=" + dir_ + "/proxy.db", "--upstream=http://" + fake_llm_->ready.http},
        dir_, absl::StrCat("proxy-", ++proxy_starts_));
    ASSERT_THAT(proxy, IsOk());
    proxy_.emplace(*std::move(proxy));
  }
  void StartLimiter(const std::string& grpc) {
    auto limiter = testing::StartService(CORRAL_RATELIMITER,
                                         {"--config=" + dir_ + "/limiter.yaml", "--secret-file=" + secret_,
                                          "--grpc-listen=" + grpc, "--metrics-listen=127.0.0.1:0"},
                                         dir_, absl::StrCat("ratelimiter-", ++limiter_starts_));
    ASSERT_THAT(limiter, IsOk());
    limiter_.emplace(*std::move(limiter));
  }
  static void Kill(std::optional<testing::RunningService>& s) {
    s->process.Signal(SIGKILL);
    (void)s->process.Wait(absl::Seconds(10));
    s.reset();
  }

  void StartHost(int capacity) {
    Host h;
    h.uids.emplace(60000, 64999, 64);
    h.root = absl::StrCat("/var/tmp/corral-sched-it-", getpid(), "-", hosts_.size());
    h.capacity = capacity;
    hosts_.push_back(std::move(h));
    ASSERT_NO_FATAL_FAILURE(RestartHost(hosts_.size() - 1, "127.0.0.1:0"));
  }
  // (Re)starts host `i` on its root and uids; a restart passes the address it had, so the scheduler finds it.
  void RestartHost(size_t i, const std::string& grpc) {
    Host& h = hosts_[i];
    auto s = testing::StartService(
        CORRAL_SANDBOX_HOST,
        {"--secret-file=" + secret_, "--grpc-listen=" + grpc, "--metrics-listen=127.0.0.1:0", "--root=" + h.root,
         absl::StrCat("--capacity=", h.capacity), absl::StrCat("--uid-first=", h.uids->first()),
         absl::StrCat("--uid-last=", h.uids->last()), absl::StrCat("--host-id=it-", i),
         "--harness-root=" + harness_root_},
        dir_, absl::StrCat("sandbox-host-", i, "-", ++h.starts));
    ASSERT_THAT(s, IsOk());
    h.service.emplace(*std::move(s));
  }
  // No process of host `i`'s uids and no home under its root: what a killed host left is gone.
  ::testing::AssertionResult NothingOnTheMachine(size_t i) {
    const Host& h = hosts_[i];
    // (A killed process whose new parent has not reaped it yet is a zombie: it runs nothing, and is not counted.)
    if (const auto pids = RunningAs(h.uids->first(), h.uids->last()); !pids.empty()) {
      return ::testing::AssertionFailure()
             << pids.size() << " process(es) still run as the host's uids, pid " << pids.front();
    }
    std::error_code ec;
    if (!std::filesystem::is_empty(h.root + "/homes", ec)) {
      return ::testing::AssertionFailure() << h.root << "/homes is not empty";
    }
    return ::testing::AssertionSuccess();
  }

  // (Re)starts the scheduler on the same journal; its address changes.
  void StartScheduler() {
    std::vector<std::string> args = {"--secret-file=" + secret_,
                                     "--grpc-listen=127.0.0.1:0",
                                     "--metrics-listen=127.0.0.1:0",
                                     "--http-listen=127.0.0.1:0",
                                     "--journal=" + dir_ + "/scheduler.db",
                                     "--proxy=" + proxy_->ready.grpc,
                                     "--ratelimiter=" + limiter_->ready.grpc,
                                     "--default-model=fake-model",
                                     "--host-poll-interval=200ms",
                                     "--retry-backoff=300ms",
                                     "--scheduler-id=it"};
    if (!use_dns_) {
      for (const auto& h : hosts_) args.push_back("--host=" + h.service->ready.grpc);
    } else {
      // Found through a DNS name, as a Kubernetes headless Service lists its pods.
      const std::string& a = hosts_.front().service->ready.grpc;
      args.push_back("--hosts-dns=localhost" + a.substr(a.rfind(':')));
      args.push_back("--dns-interval=1s");
    }
    args.insert(args.end(), scheduler_args_.begin(), scheduler_args_.end());
    auto s = testing::StartService(CORRAL_SCHEDULER, args, dir_, absl::StrCat("scheduler-", ++scheduler_starts_));
    ASSERT_THAT(s, IsOk());
    scheduler_.emplace(*std::move(s));
    ChannelOptions options;
    options.retry_unavailable = false;
    scheduler_stub_ = v1::Scheduler::NewStub(*MakeChannel(scheduler_->ready.grpc, options));
  }

  void Prepare(grpc::ClientContext& ctx, absl::Duration timeout = absl::Seconds(30)) {
    SetDeadline(ctx, timeout);
    AttachBearer(ctx, token_);
  }

  absl::StatusOr<v1::Batch> Submit(const v1::BatchSpec& spec, const std::vector<v1::Task>& tasks) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::Batch batch;
    auto writer = scheduler_stub_->Submit(&ctx, &batch);
    v1::SubmitRequest first;
    *first.mutable_spec() = spec;
    writer->Write(first);
    v1::SubmitRequest chunk;
    for (const auto& t : tasks) *chunk.mutable_tasks()->add_tasks() = t;
    if (!tasks.empty()) writer->Write(chunk);
    writer->WritesDone();
    grpc::Status s = writer->Finish();
    if (!s.ok()) return FromGrpcStatus(s);
    return batch;
  }

  // Runs `task` as the one episode of a batch of its own ("one-<task id>"; `max_attempts` 0: the default): its
  // result.
  absl::StatusOr<v1::EpisodeResult> RunOne(const v1::Task& task, uint32_t max_attempts = 0) {
    v1::BatchSpec spec;
    spec.set_batch_id("one-" + task.id());
    spec.set_group_size(1);
    spec.set_max_attempts(max_attempts);
    if (auto submitted = Submit(spec, {task}); !submitted.ok()) return submitted.status();
    auto results = Results(spec.batch_id());
    if (!results.ok()) return results.status();
    if (results->size() != 1) return absl::InternalError(absl::StrCat(results->size(), " results, not 1"));
    return results->front();
  }

  // Streams the batch's results to the end (the stream ends once the batch is done), or only the first `limit`.
  absl::StatusOr<std::vector<v1::EpisodeResult>> Results(
      const std::string& batch_id, bool whole_groups = false, absl::Duration timeout = absl::Minutes(3),
      size_t limit = SIZE_MAX, v1::TrajectoryFormat format = v1::TRAJECTORY_FORMAT_UNSPECIFIED) {
    grpc::ClientContext ctx;
    Prepare(ctx, timeout);
    v1::StreamResultsRequest req;
    req.set_batch_id(batch_id);
    req.set_whole_groups(whole_groups);
    req.set_trajectory_format(format);
    auto reader = scheduler_stub_->StreamResults(&ctx, req);
    std::vector<v1::EpisodeResult> out;
    v1::StreamResultsResponse msg;
    while (out.size() < limit && reader->Read(&msg)) {
      if (msg.has_result()) out.push_back(msg.result());
    }
    if (out.size() >= limit) ctx.TryCancel();
    grpc::Status s = reader->Finish();
    if (!s.ok() && out.size() < limit) return FromGrpcStatus(s);
    return out;
  }

  absl::StatusOr<v1::Batch> GetBatch(const std::string& batch_id) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::GetBatchRequest req;
    req.set_batch_id(batch_id);
    v1::Batch b;
    grpc::Status s = scheduler_stub_->GetBatch(&ctx, req, &b);
    if (!s.ok()) return FromGrpcStatus(s);
    return b;
  }

  absl::StatusOr<uint32_t> Ack(const std::vector<std::string>& ids) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::AckRequest req;
    for (const auto& id : ids) req.add_episode_ids(id);
    v1::AckResponse resp;
    grpc::Status s = scheduler_stub_->Ack(&ctx, req, &resp);
    if (!s.ok()) return FromGrpcStatus(s);
    return resp.acked();
  }

  // Live sandboxes on host `i` (those the scheduler labelled), and open sessions on the proxy.
  int LiveSandboxes(size_t i) {
    auto stub = v1::SandboxHost::NewStub(*MakeChannel(hosts_[i].service->ready.grpc));
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::ListSandboxesRequest req;
    req.set_page_size(1000);
    v1::ListSandboxesResponse resp;
    if (!stub->ListSandboxes(&ctx, req, &resp).ok()) return -1;
    return resp.sandboxes_size();
  }
  // Hosts that have answered the scheduler's HostInfo (what it knows of them: harnesses, capacity), -1 when it
  // cannot say.
  int KnownHosts() {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::ListHostsResponse resp;
    if (!scheduler_stub_->ListHosts(&ctx, v1::ListHostsRequest(), &resp).ok()) return -1;
    return static_cast<int>(absl::c_count_if(resp.hosts(), [](const v1::Host& h) { return !h.host_id().empty(); }));
  }
  // Episodes the scheduler has running on the host with `host_id` (-1 when it cannot say).
  int RunningOn(const std::string& host_id) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::ListHostsRequest req;
    v1::ListHostsResponse resp;
    if (!scheduler_stub_->ListHosts(&ctx, req, &resp).ok()) return -1;
    for (const v1::Host& h : resp.hosts()) {
      if (h.host_id() == host_id) return static_cast<int>(h.running_episodes());
    }
    return -1;
  }
  int OpenSessions() {
    auto stub = v1::Proxy::NewStub(*MakeChannel(proxy_->ready.grpc));
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::ListSessionsRequest req;
    req.set_page_size(1000);
    req.set_state(v1::SESSION_STATE_OPEN);
    v1::ListSessionsResponse resp;
    if (!stub->ListSessions(&ctx, req, &resp).ok()) return -1;
    return resp.sessions_size();
  }
  // True once every host has no sandbox left and the proxy no open session (teardown is asynchronous).
  // Says what is left when something is (sandboxes per host, open sessions), so a leak can be told apart.
  ::testing::AssertionResult NothingLeaked(absl::Duration timeout = absl::Seconds(30)) {
    std::string left;
    const bool clean = testing::WaitUntil(
        [&] {
          left.clear();
          for (size_t i = 0; i < hosts_.size(); ++i) {
            if (!hosts_[i].service) continue;
            if (const int64_t live = LiveSandboxes(i); live != 0)
              absl::StrAppend(&left, live, " sandbox(es) on host ", i, "; ");
          }
          if (const int64_t open = OpenSessions(); open != 0) absl::StrAppend(&left, open, " open session(s)");
          return left.empty();
        },
        timeout);
    if (clean) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "left after " << absl::FormatDuration(timeout) << ": " << left;
  }

  struct Host {
    std::optional<testing::UidRange> uids;
    std::string root;
    int capacity = 0;
    int starts = 0;
    std::optional<testing::RunningService> service;
  };

  std::string dir_, secret_, token_;
  std::vector<std::string> fake_llm_args_ = {"--arithmetic"};  // how StartCluster's model plays
  std::optional<testing::RunningService> fake_llm_, proxy_, limiter_, scheduler_;
  std::vector<Host> hosts_;
  std::vector<std::string> scheduler_args_;
  int code_exec_permits_ = 8;  // the ratelimiter's code_exec/{language}
  // The hosts' --harness-root: none installed unless a test installs some there.
  std::string harness_root_ = "/nonexistent/corral-harnesses";
  int scheduler_starts_ = 0, proxy_starts_ = 0, limiter_starts_ = 0;
  bool use_dns_ = false;  // find the (first) host through hosts_dns instead of --host
  std::unique_ptr<v1::Scheduler::Stub> scheduler_stub_;
};

}  // namespace corral
