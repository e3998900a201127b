// corral-bench-scheduler: the scheduler benchmark's two sides, the same episodes each way.
//   --mode=scheduler  submits N tool_loop episodes (2 LLM calls + 1 bash exec each) to corral-scheduler, streams
//                     the results (CALLS form), acknowledges them; prints episodes/s and the per-episode
//                     orchestration overhead (total minus LLM call time minus tool time).
//   --mode=direct     the floor: the same episodes with no scheduler, proxy or limiter — C worker threads call
//                     the scripted model and the sandbox host directly (create, chat, exec, chat, delete).
//   --mode=queue      submits N tool_loop episodes that cannot start (their host is drained) and exits: for RSS.
// Output: one line of key=value.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/use_future.hpp"
#include "boost/json.hpp"
#include "corral/v1/sandbox.grpc.pb.h"
#include "corral/v1/scheduler.grpc.pb.h"
#include "libs/api/proto_time.h"
#include "libs/http/client.h"
#include "libs/rpc/channel.h"

namespace {

using namespace corral;  // NOLINT: a benchmark program

struct Flags {
  std::string mode, addr, host, llm;
  int n = 1000, concurrency = 256;
};

std::string Arg(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--" + name + "=", 0) == 0) return a.substr(name.size() + 3);
  }
  return fallback;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

v1::Task Task(int i) {
  v1::Task t;
  t.set_id(absl::StrCat("t", i));
  t.set_prompt(absl::StrCat("What is ", i, " + 7?"));
  t.set_answer(absl::StrCat(i + 7));
  t.set_runner(v1::RUNNER_TOOL_LOOP);
  t.mutable_reward()->set_function(v1::REWARD_FUNCTION_NUMERIC);
  v1::ToolSpec* tool = t.mutable_tool_loop()->add_tools();
  tool->set_name("shell");
  tool->set_kind(v1::TOOL_KIND_BASH);
  t.mutable_tool_loop()->set_max_turns(3);
  return t;
}

int Submit(v1::Scheduler::Stub& stub, const std::string& batch_id, int n, uint32_t group) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, absl::Minutes(5));
  v1::Batch batch;
  auto writer = stub.Submit(&ctx, &batch);
  v1::SubmitRequest spec;
  spec.mutable_spec()->set_batch_id(batch_id);
  spec.mutable_spec()->set_group_size(group);
  spec.mutable_spec()->set_seed(1);
  writer->Write(spec);
  v1::SubmitRequest chunk;
  for (int i = 0; i < n / static_cast<int>(group); ++i) {
    *chunk.mutable_tasks()->add_tasks() = Task(i);
    if (chunk.ByteSizeLong() > (1 << 20)) {
      writer->Write(chunk);
      chunk.Clear();
    }
  }
  if (chunk.tasks().tasks_size() > 0) writer->Write(chunk);
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  if (!s.ok()) {
    fprintf(stderr, "submit: %s\n", s.error_message().c_str());
    return 1;
  }
  return 0;
}

int RunScheduler(const Flags& f) {
  auto stub = v1::Scheduler::NewStub(*MakeChannel(f.addr));
  const absl::Time start = absl::Now();
  if (Submit(*stub, "bench", f.n, 4) != 0) return 1;
  grpc::ClientContext ctx;
  v1::StreamResultsRequest req;
  req.set_batch_id("bench");
  req.set_trajectory_format(v1::TRAJECTORY_FORMAT_CALLS);
  auto reader = stub->StreamResults(&ctx, req);
  v1::StreamResultsResponse msg;
  std::vector<double> overhead_ms, own_ms, acquire_ms;
  std::map<std::string, int> failures;
  std::vector<std::string> ack;
  int finished = 0, results = 0;
  absl::Time last = start;
  while (reader->Read(&msg)) {
    if (!msg.has_result()) continue;
    const v1::EpisodeResult& r = msg.result();
    ++results;
    finished += r.status() == v1::EPISODE_STATUS_FINISHED;
    if (r.status() != v1::EPISODE_STATUS_FINISHED)
      ++failures[absl::StrCat(v1::EpisodeStatus_Name(r.status()), " ", r.failure_message().substr(0, 100))];
    absl::Duration llm;
    for (const auto& c : r.trajectory().calls())
      llm += FromProto(c.timings().done()) - FromProto(c.timings().received());
    const absl::Duration overhead = FromProto(r.timings().total()) - llm - FromProto(r.timings().tools());
    overhead_ms.push_back(absl::ToDoubleMilliseconds(overhead));
    acquire_ms.push_back(absl::ToDoubleMilliseconds(FromProto(r.timings().sandbox_acquire())));
    // The scheduler's own share: also without creating the sandbox and uploading (which the direct loop pays too).
    own_ms.push_back(absl::ToDoubleMilliseconds(overhead - FromProto(r.timings().sandbox_acquire()) -
                                                FromProto(r.timings().setup())));
    last = absl::Now();
    ack.push_back(r.ids().episode_id());
    if (ack.size() >= 256) {
      grpc::ClientContext actx;
      v1::AckRequest a;
      for (auto& id : ack) a.add_episode_ids(id);
      v1::AckResponse resp;
      (void)stub->Ack(&actx, a, &resp);
      ack.clear();
    }
  }
  (void)reader->Finish();
  for (const auto& [what, count] : failures) fprintf(stderr, "  %6d x %s\n", count, what.c_str());
  const double secs = absl::ToDoubleSeconds(last - start);
  printf(
      "episodes=%d finished=%d seconds=%.2f eps=%.1f overhead_p50_ms=%.2f overhead_p99_ms=%.2f own_p50_ms=%.2f "
      "own_p99_ms=%.2f acquire_p50_ms=%.2f acquire_p99_ms=%.2f\n",
      results, finished, secs, results / secs, Percentile(overhead_ms, 0.5), Percentile(overhead_ms, 0.99),
      Percentile(own_ms, 0.5), Percentile(own_ms, 0.99), Percentile(acquire_ms, 0.5), Percentile(acquire_ms, 0.99));
  return finished == f.n ? 0 : 1;
}

int RunQueue(const Flags& f) {
  auto stub = v1::Scheduler::NewStub(*MakeChannel(f.addr));
  const absl::Time start = absl::Now();
  if (Submit(*stub, "queued", f.n, 4) != 0) return 1;
  printf("queued=%d submit_seconds=%.2f\n", f.n, absl::ToDoubleSeconds(absl::Now() - start));
  return 0;
}

// One chat call to the scripted model; returns the reply's message (JSON).
boost::json::object Chat(boost::asio::io_context& io, const std::string& host, uint16_t port,
                         const boost::json::array& messages) {
  static const char* kTools =
      R"([{"type":"function","function":{"name":"shell","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}}])";
  boost::json::object body;
  body["model"] = "fake-model";
  body["messages"] = messages;
  body["tools"] = boost::json::parse(kTools);
  body["return_token_ids"] = true;
  body["logprobs"] = true;
  http::Request req;
  req.method(boost::beast::http::verb::post);
  req.target("/v1/chat/completions");
  req.version(11);
  req.set(boost::beast::http::field::content_type, "application/json");
  req.body() = boost::json::serialize(body);
  req.prepare_payload();
  auto result = boost::asio::co_spawn(io, http::Fetch(io.get_executor(), host, port, std::move(req), absl::Seconds(30)),
                                      boost::asio::use_future)
                    .get();
  if (!result.ok()) return {};
  boost::system::error_code ec;
  auto v = boost::json::parse(result->body, ec);
  if (ec) return {};
  return v.at("choices").at(0).at("message").as_object();
}

int RunDirect(const Flags& f) {
  auto channel = *MakeChannel(f.host);
  const std::vector<std::string> hp = absl::StrSplit(f.llm, ':');
  const uint16_t port = static_cast<uint16_t>(std::stoi(hp[1]));
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  std::thread io_thread([&] { io.run(); });
  std::atomic<int> next{0}, finished{0};
  const absl::Time start = absl::Now();
  std::vector<std::thread> workers;
  for (int w = 0; w < f.concurrency; ++w) {
    workers.emplace_back([&] {
      auto stub = v1::SandboxHost::NewStub(channel);
      for (int i = next++; i < f.n; i = next++) {
        grpc::ClientContext c1;
        v1::CreateSandboxesRequest create;
        create.mutable_spec()->set_network_policy(v1::NETWORK_POLICY_NONE);
        v1::CreateSandboxesResponse created;
        if (!stub->CreateSandboxes(&c1, create, &created).ok() || created.sandboxes_size() != 1) continue;
        const std::string id = created.sandboxes(0).sandbox().sandbox_id();
        boost::json::array messages;
        boost::json::object user;
        user["role"] = "user";
        user["content"] = absl::StrCat("What is ", i / 4, " + 7?");
        messages.push_back(user);
        boost::json::object reply = Chat(io, hp[0], port, messages);
        std::string command = "true";
        if (auto* calls = reply.if_contains("tool_calls"); calls && calls->is_array() && !calls->as_array().empty()) {
          auto args = boost::json::parse(calls->as_array()[0].at("function").at("arguments").as_string());
          command = std::string(args.at("command").as_string());
        }
        grpc::ClientContext c2;
        v1::ExecRequest exec;
        exec.set_sandbox_id(id);
        for (const char* a : {"bash", "-c"}) exec.mutable_command()->add_argv(a);
        exec.mutable_command()->add_argv(command);
        auto stream = stub->Exec(&c2, exec);
        v1::ExecEvent ev;
        std::string out;
        while (stream->Read(&ev)) out += ev.stdout();
        (void)stream->Finish();
        messages.push_back(reply);
        boost::json::object tool;
        tool["role"] = "tool";
        tool["tool_call_id"] = "call";
        tool["content"] = out;
        messages.push_back(tool);
        boost::json::object last = Chat(io, hp[0], port, messages);
        grpc::ClientContext c3;
        v1::DeleteSandboxRequest del;
        del.set_sandbox_id(id);
        v1::DeleteSandboxResponse gone;
        (void)stub->DeleteSandbox(&c3, del, &gone);
        if (!last.empty()) ++finished;
      }
    });
  }
  for (auto& t : workers) t.join();
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  work.reset();
  io.stop();
  io_thread.join();
  printf("episodes=%d finished=%d seconds=%.2f eps=%.1f\n", f.n, finished.load(), secs, f.n / secs);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  f.mode = Arg(argc, argv, "mode", "scheduler");
  f.addr = Arg(argc, argv, "addr", "");
  f.host = Arg(argc, argv, "host", "");
  f.llm = Arg(argc, argv, "llm", "");
  f.n = std::stoi(Arg(argc, argv, "n", "1000"));
  f.concurrency = std::stoi(Arg(argc, argv, "concurrency", "256"));
  if (f.mode == "scheduler") return RunScheduler(f);
  if (f.mode == "queue") return RunQueue(f);
  if (f.mode == "direct") return RunDirect(f);
  fprintf(stderr, "--mode=scheduler|direct|queue\n");
  return 2;
}
