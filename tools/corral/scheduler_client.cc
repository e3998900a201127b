#include "tools/corral/scheduler_client.h"

#include <algorithm>
#include <fstream>
#include <iostream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/channel.h"
#include "libs/rpc/status_conversion.h"
#include "tools/corral/harbor.h"

namespace corral::cli {

void Scheduler::Prepare(grpc::ClientContext& ctx, bool deadline) const {
  if (deadline) SetDeadline(ctx, absl::Seconds(timeout_s));
  AttachBearer(ctx, token);
}

absl::StatusOr<v1::Batch> Scheduler::Submit(const v1::BatchSpec& spec, const std::vector<v1::Task>& tasks) const {
  grpc::ClientContext ctx;
  SetDeadline(ctx, absl::Seconds(std::max(60.0, timeout_s)));
  AttachBearer(ctx, token);
  v1::Batch batch;
  auto writer = stub->Submit(&ctx, &batch);
  v1::SubmitRequest first;
  *first.mutable_spec() = spec;
  bool ok = writer->Write(first);
  v1::SubmitRequest chunk;
  for (size_t i = 0; ok && i < tasks.size(); ++i) {
    *chunk.mutable_tasks()->add_tasks() = tasks[i];
    if (chunk.ByteSizeLong() > (2 << 20) || i + 1 == tasks.size()) {
      ok = writer->Write(chunk);
      chunk.Clear();
    }
  }
  writer->WritesDone();
  if (grpc::Status st = writer->Finish(); !st.ok()) return FromGrpcStatus(st);
  return batch;
}

absl::StatusOr<v1::Batch> Scheduler::GetBatch(const std::string& batch_id, bool task_stats) const {
  grpc::ClientContext ctx;
  Prepare(ctx);
  v1::GetBatchRequest req;
  req.set_batch_id(batch_id);
  req.set_task_stats(task_stats);
  v1::Batch batch;
  if (grpc::Status st = stub->GetBatch(&ctx, req, &batch); !st.ok()) return FromGrpcStatus(st);
  return batch;
}

absl::Status Scheduler::Ack(const std::vector<std::string>& episode_ids) const {
  if (episode_ids.empty()) return absl::OkStatus();
  grpc::ClientContext ctx;
  Prepare(ctx);
  v1::AckRequest req;
  for (const std::string& id : episode_ids) req.add_episode_ids(id);
  v1::AckResponse resp;
  return FromGrpcStatus(stub->Ack(&ctx, req, &resp));
}

absl::StatusOr<uint32_t> Scheduler::CancelBatch(const std::string& batch_id, const std::string& reason) const {
  grpc::ClientContext ctx;
  Prepare(ctx);
  v1::CancelRequest req;
  req.set_batch_id(batch_id);
  req.set_reason(reason);
  v1::CancelResponse resp;
  if (grpc::Status st = stub->Cancel(&ctx, req, &resp); !st.ok()) return FromGrpcStatus(st);
  return resp.cancelled();
}

v1::BatchSpec BatchFlags::Spec() const {
  v1::BatchSpec spec;
  spec.set_batch_id(batch_id);
  spec.set_group_size(group_size);
  spec.set_redundancy(redundancy);
  spec.set_priority(priority);
  spec.set_max_attempts(max_attempts);
  spec.set_tenant(tenant);
  if (seed >= 0) spec.set_seed(static_cast<uint64_t>(seed));
  if (!runner.empty()) spec.mutable_overrides()->set_runner(RunnerFromName(runner));
  if (!model.empty()) spec.mutable_overrides()->mutable_llm()->set_model(model);
  return spec;
}

void AddBatchFlags(CLI::App* cmd, BatchFlags& flags) {
  cmd->add_option("input", flags.input,
                  "a JSONL dataset ({\"id\", \"prompt\"|\"messages\", \"answer\", \"runner\", ...} per line), a "
                  "Harbor task directory, or a directory of them")
      ->required();
  cmd->add_option("--agent", flags.agent,
                  "the agent of Harbor tasks and of a dataset's agent tasks that name none: an installed harness "
                  "(claude-code, codex, opencode, gemini-cli…; see corral harness list) or a command run in each "
                  "sandbox (bash -c)");
  cmd->add_option("--agent-file", flags.agent_files,
                  "Harbor tasks: a local file uploaded into each sandbox as .corral/agent/<name> (the agent program; "
                  "repeatable)");
  cmd->add_flag(
      "--harbor-images", flags.harbor_images,
      "Harbor tasks: run each in its image — the Dockerfile's FROM, its RUN/COPY/ENV/WORKDIR a template built "
      "on it, or task.toml's docker_image as is — pulled by the sandbox hosts (which need image support)");
  cmd->add_option("--skip", flags.skip_file,
                  "leave out the task ids listed in this file, one per line ('#' starts a comment): e.g. the "
                  "quarantine corral audit wrote");
  cmd->add_option("--group-size", flags.group_size, "episodes per task (a GRPO group)")->capture_default_str();
  cmd->add_option("--redundancy", flags.redundancy, "extra episodes per group, cancelled once the group is complete");
  cmd->add_option("--runner", flags.runner, "override every task's runner")
      ->check(CLI::IsMember({"single_turn", "tool_loop", "agent"}));
  cmd->add_option("--model", flags.model, "override every task's model");
  cmd->add_option("--seed", flags.seed, "batch seed (default: random, reported)");
  cmd->add_option("--batch-id", flags.batch_id, "client-chosen batch id: resubmitting it is idempotent");
  cmd->add_option("--priority", flags.priority, "higher runs first");
  cmd->add_option("--max-attempts", flags.max_attempts, "attempts per episode for infra failures");
  cmd->add_option("--tenant", flags.tenant,
                  "whose batch it is, for the usage metrics per tenant (corral_usage_*_total; default: default)");
}

absl::StatusOr<std::vector<v1::Task>> LoadBatchTasks(const BatchFlags& flags) {
  auto tasks = LoadTaskInput(flags.input, flags.agent, flags.agent_files, flags.harbor_images);
  if (!tasks.ok() || flags.skip_file.empty()) return tasks;
  std::ifstream in(flags.skip_file);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the skip file ", flags.skip_file));
  absl::flat_hash_set<std::string> skip;
  for (std::string line; std::getline(in, line);) {
    const std::string id(absl::StripAsciiWhitespace(line.substr(0, line.find('#'))));
    if (!id.empty()) skip.insert(id);
  }
  const size_t before = tasks->size();
  std::erase_if(*tasks, [&](const v1::Task& t) { return skip.contains(t.id()); });
  if (tasks->size() < before) {
    std::cerr << "skipping " << before - tasks->size() << " task(s) listed in " << flags.skip_file << "\n";
  }
  return tasks;
}

absl::StatusOr<Scheduler> ConnectScheduler(ConnectFlags& flags) {
  if (absl::Status s = flags.ResolveCluster(); !s.ok()) return s;
  auto token = flags.BearerToken();
  if (!token.ok()) return token.status();
  auto channel = MakeChannel(flags.address, flags.Channel());
  if (!channel.ok()) return channel.status();
  return Scheduler{v1::Scheduler::NewStub(*channel), *token, flags.timeout_s};
}

std::string StateName(v1::BatchState state) {
  switch (state) {
    case v1::BATCH_STATE_RUNNING: return "running";
    case v1::BATCH_STATE_COMPLETE: return "complete";
    case v1::BATCH_STATE_CANCELLED: return "cancelled";
    default: return "?";
  }
}

v1::Runner RunnerFromName(const std::string& name) {
  if (name == "single_turn") return v1::RUNNER_SINGLE_TURN;
  if (name == "tool_loop") return v1::RUNNER_TOOL_LOOP;
  if (name == "agent") return v1::RUNNER_AGENT;
  return v1::RUNNER_UNSPECIFIED;
}

}  // namespace corral::cli
