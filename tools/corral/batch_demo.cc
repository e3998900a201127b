// `corral up --demo`, the scheduler part: one batch of GRPO groups on the scripted model — arithmetic tasks run
// by the tool_loop runner (the model calls a Python tool in a sandbox), one by the agent runner (a small agent
// process in a proxy_only sandbox, then a verifier), one single_turn — streamed back whole group by whole group,
// acknowledged, summarised, and one trajectory shown with its token ids.
#include <iostream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "corral/v1/scheduler.grpc.pb.h"
#include "libs/api/proto_time.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/channel.h"
#include "libs/rpc/status_conversion.h"
#include "tools/corral/demo.h"

namespace corral::cli {
namespace {

// An agent in the Harbor style: reads its instruction, asks the model (offering a python tool), runs the code
// the model wrote, sends the output back, and writes the model's final answer to /workspace/answer.txt.
constexpr char kAgent[] = R"py(
import json, os, subprocess, urllib.request
base, key, model = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"], os.environ["OPENAI_MODEL"]
def chat(messages, tools):
    req = urllib.request.Request(base + "/chat/completions", method="POST",
        data=json.dumps({"model": model, "messages": messages, "tools": tools}).encode(),
        headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["message"]
tools = [{"type": "function", "function": {"name": "python", "parameters": {"type": "object",
          "properties": {"code": {"type": "string"}}, "required": ["code"]}}}]
messages = [{"role": "user", "content": open(os.environ["CORRAL_INSTRUCTION_FILE"]).read()}]
reply = chat(messages, tools)
while reply.get("tool_calls"):
    call = reply["tool_calls"][0]
    code = json.loads(call["function"]["arguments"])["code"]
    out = subprocess.run(["python3", "-c", code], capture_output=True, text=True, timeout=30).stdout
    messages += [reply, {"role": "tool", "tool_call_id": call["id"], "content": out}]
    reply = chat(messages, tools)
open("/workspace/answer.txt", "w").write(reply.get("content") or "")
print("agent answered:", reply.get("content"))
)py";

// The verifier: the last number of the answer against the task's reference answer.
constexpr char kVerifier[] = R"py(
import json, os, re
task = json.load(open(os.path.join(os.environ["HOME"], ".corral/task.json")))
answer = open("/workspace/answer.txt").read() if os.path.exists("/workspace/answer.txt") else ""
numbers = re.findall(r"-?\d+", answer)
os.makedirs("/logs/verifier", exist_ok=True)
open("/logs/verifier/reward.txt", "w").write("1" if numbers and numbers[-1] == task["answer"] else "0")
)py";

struct Problem {
  const char* id;
  int a, b;
  char op;
};

v1::Task Arithmetic(const Problem& p, v1::Runner runner) {
  const int value = p.op == '+' ? p.a + p.b : p.op == '-' ? p.a - p.b : p.a * p.b;
  v1::Task t;
  t.set_id(p.id);
  t.set_prompt(absl::StrFormat("What is %d %c %d?", p.a, p.op, p.b));
  t.set_answer(absl::StrCat(value));
  t.set_runner(runner);
  t.mutable_llm()->set_seed_sampling(true);
  if (runner == v1::RUNNER_TOOL_LOOP) {
    t.mutable_reward()->set_function(v1::REWARD_FUNCTION_NUMERIC);
    v1::ToolSpec* tool = t.mutable_tool_loop()->add_tools();
    tool->set_name("python");
    tool->set_kind(v1::TOOL_KIND_CODE_INTERPRETER);
    t.mutable_tool_loop()->set_max_turns(4);
  } else if (runner == v1::RUNNER_AGENT) {
    for (const char* arg : {"python3", "-c", kAgent}) t.mutable_agent()->mutable_command()->add_argv(arg);
    for (const char* arg : {"python3", "-c", kVerifier}) t.mutable_verifier()->mutable_command()->add_argv(arg);
  } else {
    t.mutable_reward()->set_function(v1::REWARD_FUNCTION_GSM8K);
  }
  return t;
}

// A whole group's line: its task, runner and prompt, each episode's reward (or status) and their mean.
void PrintGroup(const v1::Task& task, const std::vector<v1::EpisodeResult>& g) {
  std::vector<std::string> rewards;
  double sum = 0;
  for (const auto& e : g) {
    rewards.push_back(e.has_reward() ? absl::StrFormat("%.0f", e.reward()) : v1::EpisodeStatus_Name(e.status()));
    sum += e.has_reward() ? e.reward() : 0;
  }
  const char* runner = task.runner() == v1::RUNNER_TOOL_LOOP ? "tool_loop"
                       : task.runner() == v1::RUNNER_AGENT   ? "agent"
                                                             : "single_turn";
  std::cout << absl::StrFormat("  group %-10s %-11s %-22s rewards [%s]  mean %.2f  (%.1fs)\n", task.id(), runner,
                               task.prompt(), absl::StrJoin(rewards, " "), sum / static_cast<double>(g.size()),
                               absl::ToDoubleSeconds(FromProto(g.back().timings().total())));
}

// One episode's first branch, a message a line, as the trainer receives it.
void PrintTrajectory(const v1::EpisodeResult& example) {
  std::cout << "  one trajectory (" << example.ids().episode_id() << ", reward "
            << absl::StrFormat("%.0f", example.reward()) << "), as the trainer receives it:\n";
  for (const auto& m : example.trajectory().branches(0).messages()) {
    std::string text = m.message().content();
    for (const auto& tc : m.message().tool_calls())
      text += absl::StrCat("[", tc.function_name(), " ", tc.arguments(), "]");
    while (!text.empty() && text.back() == '\n') text.pop_back();
    std::cout << absl::StrFormat("    %-9s %-9s %-48s %s\n", m.message().role(), m.generated() ? "generated" : "",
                                 text.substr(0, 48),
                                 m.token_ids().empty() ? "" : absl::StrCat(m.token_ids_size(), " token ids"));
  }
}

}  // namespace

int RunBatchDemo(const std::string& scheduler, const std::string& token, bool sandboxes) {
  std::cout
      << "\ndemo: a batch of GRPO groups through the scheduler (scripted model; one seed in four answers wrong)\n";
  auto channel = MakeChannel(scheduler);
  if (!channel.ok()) return 1;
  auto stub = v1::Scheduler::NewStub(*channel);

  std::vector<v1::Task> tasks;
  const Problem problems[] = {{"add", 17, 25, '+'}, {"sub", 91, 37, '-'}, {"mul", 12, 13, '*'}, {"mul2", 23, 19, '*'}};
  for (const Problem& p : problems)
    tasks.push_back(Arithmetic(p, sandboxes ? v1::RUNNER_TOOL_LOOP : v1::RUNNER_SINGLE_TURN));
  if (sandboxes) tasks.push_back(Arithmetic({"agent-add", 345, 678, '+'}, v1::RUNNER_AGENT));
  tasks.push_back(Arithmetic({"gsm8k-mul", 6, 7, '*'}, v1::RUNNER_SINGLE_TURN));

  grpc::ClientContext ctx;
  SetDeadline(ctx, absl::Seconds(30));
  AttachBearer(ctx, token);
  v1::Batch batch;
  auto writer = stub->Submit(&ctx, &batch);
  v1::SubmitRequest spec;
  spec.mutable_spec()->set_group_size(4);
  spec.mutable_spec()->set_seed(2026);
  (*spec.mutable_spec()->mutable_labels())["source"] = "corral-up-demo";
  v1::SubmitRequest chunk;
  for (auto& t : tasks) *chunk.mutable_tasks()->add_tasks() = t;
  writer->Write(spec);
  writer->Write(chunk);
  writer->WritesDone();
  if (grpc::Status s = writer->Finish(); !s.ok()) {
    std::cerr << "demo: Submit failed: " << FromGrpcStatus(s) << "\n";
    return 1;
  }
  std::cout << absl::StrFormat("  batch %s: %d tasks x group of 4 = %d episodes, seed %d\n", batch.batch_id(),
                               batch.task_count(), batch.counts().total(), batch.spec().seed());

  grpc::ClientContext sctx;
  SetDeadline(sctx, absl::Minutes(5));
  AttachBearer(sctx, token);
  v1::StreamResultsRequest req;
  req.set_batch_id(batch.batch_id());
  req.set_whole_groups(true);
  auto reader = stub->StreamResults(&sctx, req);
  v1::StreamResultsResponse msg;
  std::map<uint32_t, std::vector<v1::EpisodeResult>> groups;
  std::vector<std::string> acked;
  int finished = 0, with_tokens = 0, total = 0;
  std::optional<v1::EpisodeResult> example;
  while (reader->Read(&msg)) {
    if (!msg.has_result()) continue;
    const v1::EpisodeResult& r = msg.result();
    ++total;
    finished += r.status() == v1::EPISODE_STATUS_FINISHED;
    bool tokens = r.trajectory().branches_size() > 0 && !r.trajectory().branches(0).token_ids().empty();
    with_tokens += tokens;
    if (!example && r.tool_calls() > 0 && tokens) example = r;
    acked.push_back(r.ids().episode_id());
    auto& g = groups[r.ids().group_index()];
    g.push_back(r);
    if (g.size() == 4) PrintGroup(tasks[r.ids().group_index()], g);
  }
  if (grpc::Status s = reader->Finish(); !s.ok()) {
    std::cerr << "demo: StreamResults failed: " << FromGrpcStatus(s) << "\n";
    return 1;
  }
  grpc::ClientContext actx;
  SetDeadline(actx, absl::Seconds(10));
  AttachBearer(actx, token);
  v1::AckRequest ack;
  for (auto& id : acked) ack.add_episode_ids(id);
  v1::AckResponse ack_resp;
  (void)stub->Ack(&actx, ack, &ack_resp);
  if (example) PrintTrajectory(*example);
  const bool ok = static_cast<uint32_t>(total) == batch.counts().total() && finished == total && with_tokens == total &&
                  ack_resp.acked() == static_cast<uint32_t>(total);
  std::cout << absl::StrFormat("  %s: %d/%d episodes finished, %d with token ids, %d acknowledged\n",
                               ok ? "ok" : "FAILED", finished, total, with_tokens, ack_resp.acked());
  return ok ? 0 : 1;
}

}  // namespace corral::cli
