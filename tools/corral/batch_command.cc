// `corral batch submit|ls|get|cancel`, `corral results`, `corral hosts ls`, `corral drain`: the scheduler from the
// shell. Human output by default, --json for machines. The scheduler's address defaults to the local
// `corral up` cluster (.corral/cluster.json).
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "corral/v1/scheduler.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "libs/api/proto_time.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/channel.h"
#include "libs/rpc/status_conversion.h"
#include "tools/corral/commands.h"
#include "tools/corral/connect_flags.h"
#include "tools/corral/harbor.h"
#include "tools/corral/output.h"
#include "tools/corral/run_report.h"
#include "tools/corral/scheduler_client.h"

namespace corral::cli {
namespace {

std::string Counts(const v1::EpisodeCounts& c) {
  std::string out = absl::StrFormat("%d finished, %d failed, %d timeout, %d cancelled, %d no-data", c.finished(),
                                    c.failed(), c.timeout(), c.cancelled(), c.no_data());
  if (c.filtered() > 0) absl::StrAppendFormat(&out, ", %d filtered", c.filtered());
  absl::StrAppendFormat(&out, "; %d queued, %d running", c.queued(), c.running());
  return out;
}

// Dynamic sampling and staleness, when the batch uses them.
std::string AsyncCounts(const v1::Batch& b) {
  const v1::BatchSpec& s = b.spec();
  std::string out;
  if (s.target_groups() > 0 || b.groups().filtered() > 0 || b.groups().dropped() > 0) {
    out = absl::StrFormat("  groups: %d passed", b.groups().passed());
    if (s.target_groups() > 0) absl::StrAppendFormat(&out, " of %d wanted", s.target_groups());
    absl::StrAppendFormat(&out, ", %d filtered, %d dropped, %d surplus; %d of %d started\n", b.groups().filtered(),
                          b.groups().dropped(), b.groups().surplus(), b.groups().started(), b.groups().total());
  }
  if (s.groups_in_flight() > 0) {
    absl::StrAppendFormat(&out, "  stream: %d groups in flight, input %s\n", s.groups_in_flight(),
                          b.input_open() ? "open (AppendTasks)" : "closed");
  }
  if (s.has_max_staleness()) {
    absl::StrAppendFormat(&out, "  max staleness %d (base version %d, %d groups per step): %d stale reruns\n",
                          s.max_staleness(), s.base_policy_version(), s.step_groups(), b.counts().stale_reruns());
  }
  return out;
}

void PrintBatch(const v1::Batch& b) {
  std::cout << absl::StrFormat("batch %s: %s, %d tasks x %d (+%d extra) = %d episodes, %.0f%% done\n", b.batch_id(),
                               StateName(b.state()), b.task_count(), b.spec().group_size(), b.spec().redundancy(),
                               b.counts().total(), 100 * b.progress());
  std::cout << "  " << Counts(b.counts()) << "\n";
  std::cout << absl::StrFormat("  delivered %d, acked %d, retries %d, redundant cancelled %d, seed %d\n",
                               b.counts().delivered(), b.counts().acked(), b.counts().retries(),
                               b.counts().redundant_cancelled(), b.spec().seed());
  std::cout << AsyncCounts(b);
  if (b.has_mean_reward()) std::cout << absl::StrFormat("  mean reward %.4f\n", b.mean_reward());
}

void PrintTaskStats(const v1::Batch& b) {
  if (b.task_stats().empty()) return;
  std::cout << absl::StrFormat("  %-32s %8s %8s %8s %9s %s\n", "TASK", "EPISODES", "FINISHED", "REWARD", "PASS",
                               "GROUP");
  for (const v1::TaskStats& t : b.task_stats()) {
    std::cout << absl::StrFormat("  %-32s %8d %8d %8s %9s %s\n", t.task_id(), t.episodes(), t.finished(),
                                 t.has_mean_reward() ? absl::StrFormat("%.3f", t.mean_reward()) : "-",
                                 t.has_pass_rate() ? absl::StrFormat("%.0f%%", 100 * t.pass_rate()) : "-",
                                 !t.has_passed() ? "-" : (t.passed() ? "passed" : "not passed"));
  }
}

// One line of progress, redrawn in place on a terminal.
void DrawProgress(const v1::Batch& b, bool tty) {
  const int width = 30;
  const int filled = static_cast<int>(b.progress() * width);
  std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
  const std::string line = absl::StrFormat(
      "[%s] %d/%d  ok %d  failed %d  timeout %d  cancelled %d  running %d%s", bar, EndedEpisodes(b.counts()),
      b.counts().total(), b.counts().finished(), b.counts().failed(), b.counts().timeout(), b.counts().cancelled(),
      b.counts().running(), b.has_mean_reward() ? absl::StrFormat("  reward %.3f", b.mean_reward()) : "");
  if (tty) {
    std::cerr << "\r" << line << "\033[K" << std::flush;
  } else {
    std::cerr << line << "\n";
  }
}

struct ResultsFlags {
  ConnectFlags conn;
  std::string batch, out, format = "trajectory", cursor;
  bool ack = false, whole_groups = false, exclude_trajectories = false, json = false, quiet = false;
};

// Streams results (and progress) until the batch's stream ends; writes each result as one JSON line to `out`
// (or stdout), acks them when asked. Returns the exit code.
int StreamResults(Scheduler& s, const ResultsFlags& f) {
  grpc::ClientContext ctx;
  s.Prepare(ctx, /*deadline=*/false);
  v1::StreamResultsRequest req;
  req.set_batch_id(f.batch);
  req.set_cursor(f.cursor);
  req.set_whole_groups(f.whole_groups);
  req.set_exclude_trajectories(f.exclude_trajectories);
  req.set_trajectory_format(f.format == "calls" ? v1::TRAJECTORY_FORMAT_CALLS : v1::TRAJECTORY_FORMAT_TRAJECTORY);
  std::ofstream file;
  if (!f.out.empty()) {
    file.open(f.out, std::ios::app);
    if (!file) return Fail("results", absl::NotFoundError("cannot write " + f.out));
  }
  std::ostream& out = f.out.empty() ? std::cout : file;
  const bool tty = isatty(STDERR_FILENO);
  auto reader = s.stub->StreamResults(&ctx, req);
  v1::StreamResultsResponse msg;
  std::vector<std::string> to_ack;
  int results = 0;
  auto flush_acks = [&]() -> bool {
    if (to_ack.empty()) return true;
    grpc::ClientContext actx;
    s.Prepare(actx);
    v1::AckRequest ack;
    for (auto& id : to_ack) ack.add_episode_ids(id);
    v1::AckResponse resp;
    grpc::Status st = s.stub->Ack(&actx, ack, &resp);
    if (!st.ok()) {
      Fail("results --ack", FromGrpcStatus(st));
      return false;
    }
    to_ack.clear();
    return true;
  };
  while (reader->Read(&msg)) {
    if (msg.has_progress()) {
      if (!f.quiet) DrawProgress(msg.progress(), tty);
      continue;
    }
    ++results;
    if (!f.out.empty() || !f.quiet) out << ResultJson(msg.result()) << "\n";
    if (f.ack) {
      out.flush();  // written before acknowledged
      to_ack.push_back(msg.result().ids().episode_id());
      if (to_ack.size() >= 64 && !flush_acks()) return 1;
    }
  }
  grpc::Status st = reader->Finish();
  if (tty && !f.quiet) std::cerr << "\n";
  if (f.ack && !flush_acks()) return 1;
  if (!st.ok()) return Fail("results", FromGrpcStatus(st));
  if (!f.quiet)
    std::cerr << results << " result(s)" << (f.out.empty() ? "" : " written to " + f.out)
              << (f.ack ? ", acknowledged" : "") << "\n";
  return 0;
}

// `corral batch submit`: a dataset or Harbor tasks as a batch (and, with --follow, its results).
void AddSubmit(CLI::App* batch, int& exit_code) {
  struct SubmitFlags {
    ConnectFlags conn;
    BatchFlags batch;
    std::string out;
    bool follow = false, json = false, ack = false;
  };
  auto sf = std::make_shared<SubmitFlags>();
  CLI::App* submit = batch->add_subcommand(
      "submit", "submit a JSONL dataset (one task per line) or Harbor task directories as a batch");
  AddConnectFlags(submit, sf->conn, "scheduler", "--scheduler", "scheduler");
  AddBatchFlags(submit, sf->batch);
  submit->add_flag("--follow", sf->follow, "stream results until the batch ends (progress on stderr)");
  submit->add_option("--out", sf->out, "with --follow: append results (JSON lines) to this file");
  submit->add_flag("--ack", sf->ack, "with --follow: acknowledge results once written");
  submit->add_flag("--json", sf->json, "print the batch as JSON");
  submit->callback([sf, &exit_code] {
    auto tasks = LoadBatchTasks(sf->batch);
    if (!tasks.ok()) {
      exit_code = Fail("batch submit", tasks.status());
      return;
    }
    auto s = ConnectScheduler(sf->conn);
    if (!s.ok()) {
      exit_code = Fail("batch submit", s.status());
      return;
    }
    auto submitted = s->Submit(sf->batch.Spec(), *tasks);
    if (!submitted.ok()) {
      exit_code = Fail("batch submit", submitted.status());
      return;
    }
    const v1::Batch& batch_out = *submitted;
    if (sf->json) {
      std::cout << ToJson(batch_out, true);
    } else {
      std::cerr << "submitted " << batch_out.batch_id() << ": " << batch_out.task_count() << " tasks, "
                << batch_out.counts().total() << " episodes (seed " << batch_out.spec().seed() << ")\n";
      if (!sf->follow) std::cout << batch_out.batch_id() << "\n";
    }
    if (!sf->follow) return;
    ResultsFlags rf;
    rf.batch = batch_out.batch_id();
    rf.out = sf->out.empty() ? "/dev/null" : sf->out;
    rf.ack = sf->ack;
    rf.exclude_trajectories = sf->out.empty();
    exit_code = StreamResults(*s, rf);
    if (exit_code != 0) return;
    if (auto final_batch = s->GetBatch(batch_out.batch_id()); final_batch.ok()) PrintBatch(*final_batch);
  });
}

// `corral batch ls`.
void AddList(CLI::App* batch, int& exit_code) {
  struct LsFlags {
    ConnectFlags conn;
    bool json = false;
  };
  auto lf = std::make_shared<LsFlags>();
  CLI::App* ls = batch->add_subcommand("ls", "list batches, newest first");
  AddConnectFlags(ls, lf->conn, "scheduler", "--scheduler", "scheduler");
  ls->add_flag("--json", lf->json, "JSON output");
  ls->callback([lf, &exit_code] {
    auto s = ConnectScheduler(lf->conn);
    if (!s.ok()) {
      exit_code = Fail("batch ls", s.status());
      return;
    }
    grpc::ClientContext ctx;
    s->Prepare(ctx);
    v1::ListBatchesRequest req;
    req.set_page_size(100);
    v1::ListBatchesResponse resp;
    if (grpc::Status st = s->stub->ListBatches(&ctx, req, &resp); !st.ok()) {
      exit_code = Fail("batch ls", FromGrpcStatus(st));
      return;
    }
    if (lf->json) {
      std::cout << ToJson(resp, true);
      return;
    }
    std::cout << absl::StrFormat("%-28s %-9s %6s %9s %8s %8s %7s %7s\n", "BATCH", "STATE", "TASKS", "EPISODES", "DONE",
                                 "RUNNING", "ACKED", "REWARD");
    for (const auto& b : resp.batches()) {
      std::cout << absl::StrFormat("%-28s %-9s %6d %9d %7.0f%% %8d %7d %7s\n", b.batch_id(), StateName(b.state()),
                                   b.task_count(), b.counts().total(), 100 * b.progress(), b.counts().running(),
                                   b.counts().acked(),
                                   b.has_mean_reward() ? absl::StrFormat("%.3f", b.mean_reward()) : "-");
    }
  });
}

// `corral batch get`.
void AddGet(CLI::App* batch, int& exit_code) {
  struct GetFlags {
    ConnectFlags conn;
    std::string batch;
    bool json = false, task_stats = false;
  };
  auto gf = std::make_shared<GetFlags>();
  CLI::App* get = batch->add_subcommand("get", "show one batch's counts and progress");
  AddConnectFlags(get, gf->conn, "scheduler", "--scheduler", "scheduler");
  get->add_option("batch_id", gf->batch, "the batch")->required();
  get->add_flag("--json", gf->json, "JSON output");
  get->add_flag("--task-stats", gf->task_stats, "per-task episodes, mean reward, pass rate and group verdict");
  get->callback([gf, &exit_code] {
    auto s = ConnectScheduler(gf->conn);
    if (!s.ok()) {
      exit_code = Fail("batch get", s.status());
      return;
    }
    grpc::ClientContext ctx;
    s->Prepare(ctx);
    v1::GetBatchRequest req;
    req.set_batch_id(gf->batch);
    req.set_task_stats(gf->task_stats);
    v1::Batch b;
    if (grpc::Status st = s->stub->GetBatch(&ctx, req, &b); !st.ok()) {
      exit_code = Fail("batch get", FromGrpcStatus(st));
      return;
    }
    if (gf->json) {
      std::cout << ToJson(b, true);
    } else {
      PrintBatch(b);
      PrintTaskStats(b);
    }
  });
}

// `corral batch cancel`: a batch, a group or an episode.
void AddCancel(CLI::App* batch, int& exit_code) {
  struct CancelFlags {
    ConnectFlags conn;
    std::string batch, group, episode, reason;
  };
  auto cf = std::make_shared<CancelFlags>();
  CLI::App* cancel = batch->add_subcommand("cancel", "cancel a batch, a group (--group) or an episode (--episode)");
  AddConnectFlags(cancel, cf->conn, "scheduler", "--scheduler", "scheduler");
  cancel->add_option("batch_id", cf->batch, "the batch to cancel");
  cancel->add_option("--group", cf->group, "a group id (<batch>:g<N>) instead");
  cancel->add_option("--episode", cf->episode, "an episode id (<batch>:g<N>:e<M>) instead");
  cancel->add_option("--reason", cf->reason, "recorded in the results");
  cancel->callback([cf, &exit_code] {
    v1::CancelRequest req;
    if (!cf->episode.empty()) {
      req.set_episode_id(cf->episode);
    } else if (!cf->group.empty()) {
      req.set_group_id(cf->group);
    } else if (!cf->batch.empty()) {
      req.set_batch_id(cf->batch);
    } else {
      exit_code = Fail("batch cancel", absl::InvalidArgumentError("name a batch, --group or --episode"));
      return;
    }
    req.set_reason(cf->reason);
    auto s = ConnectScheduler(cf->conn);
    if (!s.ok()) {
      exit_code = Fail("batch cancel", s.status());
      return;
    }
    grpc::ClientContext ctx;
    s->Prepare(ctx);
    v1::CancelResponse resp;
    if (grpc::Status st = s->stub->Cancel(&ctx, req, &resp); !st.ok()) {
      exit_code = Fail("batch cancel", FromGrpcStatus(st));
      return;
    }
    std::cout << resp.cancelled() << " episode(s) cancelled\n";
  });
}

// `corral results`: a batch's results as JSON lines.
void AddResults(CLI::App& app, int& exit_code) {
  auto rf = std::make_shared<ResultsFlags>();
  CLI::App* results = app.add_subcommand("results", "stream a batch's results as JSON lines (at least once)");
  AddConnectFlags(results, rf->conn, "scheduler", "--scheduler", "scheduler");
  results->add_option("--batch", rf->batch, "the batch (default: every batch; the stream then never ends)");
  results->add_option("--out", rf->out, "append results to this file instead of stdout");
  results->add_flag("--ack", rf->ack, "acknowledge results once written (the scheduler then forgets them)");
  results->add_flag("--whole-groups", rf->whole_groups, "deliver a group's results together once it is complete");
  results->add_flag("--exclude-trajectories", rf->exclude_trajectories, "leave trajectories out");
  results->add_option("--format", rf->format, "trajectory (per-branch conversations) or calls (the store)")
      ->check(CLI::IsMember({"trajectory", "calls"}));
  results->add_option("--cursor", rf->cursor, "resume after this result's cursor");
  results->add_flag("--quiet", rf->quiet, "no progress on stderr");
  results->callback([rf, &exit_code] {
    auto s = ConnectScheduler(rf->conn);
    if (!s.ok()) {
      exit_code = Fail("results", s.status());
      return;
    }
    exit_code = StreamResults(*s, *rf);
  });
}

// `corral hosts ls`.
void AddHosts(CLI::App& app, int& exit_code) {
  struct HostsFlags {
    ConnectFlags conn;
    bool json = false;
  };
  auto hf = std::make_shared<HostsFlags>();
  CLI::App* hosts = app.add_subcommand("hosts", "the scheduler's sandbox hosts");
  hosts->require_subcommand(1);
  CLI::App* hls = hosts->add_subcommand("ls", "list sandbox hosts with health and load");
  AddConnectFlags(hls, hf->conn, "scheduler", "--scheduler", "scheduler");
  hls->add_flag("--json", hf->json, "JSON output");
  hls->callback([hf, &exit_code] {
    auto s = ConnectScheduler(hf->conn);
    if (!s.ok()) {
      exit_code = Fail("hosts ls", s.status());
      return;
    }
    grpc::ClientContext ctx;
    s->Prepare(ctx);
    v1::ListHostsRequest req;
    req.set_page_size(1000);
    v1::ListHostsResponse resp;
    if (grpc::Status st = s->stub->ListHosts(&ctx, req, &resp); !st.ok()) {
      exit_code = Fail("hosts ls", FromGrpcStatus(st));
      return;
    }
    if (hf->json) {
      std::cout << ToJson(resp, true);
      return;
    }
    std::cout << absl::StrFormat("%-22s %-12s %-11s %8s %5s %5s %8s %6s  %s\n", "ADDRESS", "HOST_ID", "STATE",
                                 "CAPACITY", "LIVE", "FREE", "RUNNING", "LEASED", "HARNESSES / LAST_ERROR");
    for (const auto& h : resp.hosts()) {
      std::string state = v1::HostState_Name(h.state()).substr(std::string("HOST_STATE_").size());
      const std::string harnesses = h.harnesses().empty() ? "-" : absl::StrJoin(h.harnesses(), ",");
      std::cout << absl::StrFormat("%-22s %-12s %-11s %8d %5d %5d %8d %6d  %s%s\n", h.address(), h.host_id(),
                                   absl::AsciiStrToLower(state), h.capacity(), h.live(), h.free(), h.running_episodes(),
                                   h.leased_sandboxes(), harnesses,
                                   h.last_error().empty() ? "" : "  " + h.last_error());
    }
  });
}

// `corral drain`.
void AddDrain(CLI::App& app, int& exit_code) {
  struct DrainFlags {
    ConnectFlags conn;
    std::string host;
    double grace_s = -1;
    bool resume = false;
  };
  auto df = std::make_shared<DrainFlags>();
  CLI::App* drain = app.add_subcommand("drain", "drain the scheduler (or one host): nothing new starts there");
  AddConnectFlags(drain, df->conn, "scheduler", "--scheduler", "scheduler");
  drain->add_option("--host", df->host, "drain only this host (address or host id)");
  drain->add_option("--grace", df->grace_s, "seconds running episodes get before they are re-queued");
  drain->add_flag("--resume", df->resume, "undo the drain");
  drain->callback([df, &exit_code] {
    auto s = ConnectScheduler(df->conn);
    if (!s.ok()) {
      exit_code = Fail("drain", s.status());
      return;
    }
    grpc::ClientContext ctx;
    AttachBearer(ctx, s->token);
    v1::DrainRequest req;
    req.set_host(df->host);
    req.set_resume(df->resume);
    if (df->grace_s >= 0) ToProto(absl::Seconds(df->grace_s), req.mutable_grace());
    v1::DrainResponse resp;
    if (grpc::Status st = s->stub->Drain(&ctx, req, &resp); !st.ok()) {
      exit_code = Fail("drain", FromGrpcStatus(st));
      return;
    }
    std::cout << (df->resume ? "resumed" : "drained") << ": " << resp.finished() << " finished, " << resp.requeued()
              << " re-queued, " << resp.queued() << " queued\n";
  });
}

}  // namespace

void RegisterBatch(CLI::App& app, int& exit_code) {
  CLI::App* batch = app.add_subcommand("batch", "submit, list, show and cancel batches of episodes");
  batch->require_subcommand(1);

  AddSubmit(batch, exit_code);
  AddList(batch, exit_code);
  AddGet(batch, exit_code);
  AddCancel(batch, exit_code);
  AddResults(app, exit_code);
  AddHosts(app, exit_code);
  AddDrain(app, exit_code);
}

}  // namespace corral::cli
