// `corral run`: one command from a dataset to results — submit, watch it progress, get a summary. Ctrl-C cancels
// the batch cleanly (its episodes end CANCELLED and their sandboxes and sessions are cleaned up); a second
// Ctrl-C quits at once.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "libs/rpc/status_conversion.h"
#include "tools/corral/commands.h"
#include "tools/corral/harbor.h"
#include "tools/corral/output.h"
#include "tools/corral/pass_at_k.h"
#include "tools/corral/run_report.h"
#include "tools/corral/scheduler_client.h"
#include "tools/corral/ui_link.h"

namespace corral::cli {
namespace {

struct RunFlags {
  ConnectFlags conn;
  BatchFlags batch;
  std::string out;
  double progress_every_s = 5;
  bool no_ack = false;
  bool dry_run = false;  // print the tasks, submit nothing
  // corral eval: the attempts per task are the group size; pass@k for each of `ks` instead of the run summary.
  bool eval = false;
  std::vector<int> ks;
  double pass_threshold = 1.0;
  bool json = false;
  std::string name = "run";  // the subcommand, in messages
};

// Takes SIGINT and SIGTERM on its own thread (they are blocked everywhere else): the first cancels the batch, the
// next one quits. Stopped by SIGUSR1 from its owner.
class Interrupts {
 public:
  Interrupts() {
    sigemptyset(&set_);
    for (int sig : {SIGINT, SIGTERM, SIGUSR1}) sigaddset(&set_, sig);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);  // before gRPC starts threads: they inherit the mask
  }
  void Start(const std::string& name, std::function<void()> on_first) {
    thread_ = std::thread([this, name, on_first = std::move(on_first)] {
      int sig = 0;
      while (sigwait(&set_, &sig) == 0 && sig != SIGUSR1) {
        if (!interrupted_.exchange(true)) {
          on_first();
        } else {
          std::cerr << "\ncorral " << name << ": quitting; the batch goes on being cancelled by the scheduler\n";
          _exit(130);
        }
      }
    });
  }
  ~Interrupts() {
    if (thread_.joinable()) {
      pthread_kill(thread_.native_handle(), SIGUSR1);
      thread_.join();
    }
  }
  bool interrupted() const { return interrupted_; }

 private:
  sigset_t set_;
  std::thread thread_;
  std::atomic<bool> interrupted_{false};
};

// --dry-run: each task as one JSON line (proto field names), as it would be submitted.
int PrintTasks(const std::string& name, const std::vector<v1::Task>& tasks) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  for (const v1::Task& task : tasks) {
    std::string line;
    if (auto s = google::protobuf::util::MessageToJsonString(task, &line, options); !s.ok()) {
      return Fail(name, absl::InternalError(std::string(s.message())));
    }
    std::cout << line << "\n";
  }
  return 0;
}

int Run(const RunFlags& f) {
  Interrupts interrupts;
  auto tasks = LoadBatchTasks(f.batch);
  if (!tasks.ok()) return Fail(f.name, tasks.status());
  if (f.dry_run) return PrintTasks(f.name, *tasks);
  RunFlags flags = f;
  auto s = ConnectScheduler(flags.conn);
  if (!s.ok()) return Fail(f.name, s.status());
  std::ofstream out;
  if (!f.out.empty()) {
    out.open(f.out, std::ios::trunc);
    if (!out) return Fail(f.name, absl::NotFoundError(absl::StrCat("cannot write ", f.out)));
  }

  auto batch = s->Submit(f.batch.Spec(), *tasks);
  if (!batch.ok()) return Fail(f.name, batch.status());
  const std::string id = batch->batch_id();
  std::cerr << "corral " << f.name << ": batch " << id << ": " << batch->task_count() << " task(s) x "
            << batch->spec().group_size() << " = " << batch->counts().total() << " episode(s), seed "
            << batch->spec().seed() << "\n";

  interrupts.Start(f.name, [&] {
    std::cerr << "\ncorral " << f.name << ": cancelling batch " << id << " (Ctrl-C again to quit at once)\n";
    if (auto cancelled = s->CancelBatch(id, "corral " + f.name + " was interrupted"); !cancelled.ok()) {
      Fail(f.name + ": cancel", cancelled.status());
    }
  });

  const bool tty = isatty(STDERR_FILENO);
  RunReport report(absl::Now());
  EvalTally tally(f.pass_threshold);
  grpc::ClientContext ctx;
  s->Prepare(ctx, /*deadline=*/false);
  v1::StreamResultsRequest req;
  req.set_batch_id(id);
  req.set_exclude_trajectories(f.out.empty());
  auto reader = s->stub->StreamResults(&ctx, req);
  std::vector<std::string> to_ack;
  absl::Time last_draw = absl::InfinitePast();
  v1::StreamResultsResponse msg;
  while (reader->Read(&msg)) {
    if (msg.has_progress()) {
      report.Progress(msg.progress());
    } else {
      report.Add(msg.result());
      tally.Add(msg.result());
      if (out.is_open()) out << ResultJson(msg.result()) << "\n";
      if (!f.no_ack) to_ack.push_back(msg.result().ids().episode_id());
      if (to_ack.size() >= 64) {
        out.flush();  // written before acknowledged
        if (absl::Status st = s->Ack(to_ack); !st.ok()) return Fail(f.name + ": ack", st);
        to_ack.clear();
      }
    }
    const absl::Time now = absl::Now();
    if (tty && now - last_draw >= absl::Milliseconds(100)) {
      std::cerr << "\r" << report.Line(now, 24) << "\033[K" << std::flush;
      last_draw = now;
    } else if (!tty && now - last_draw >= absl::Seconds(f.progress_every_s)) {
      std::cerr << report.Line(now, 0) << "\n";
      last_draw = now;
    }
  }
  const grpc::Status st = reader->Finish();
  out.flush();
  if (absl::Status acked = s->Ack(to_ack); !acked.ok()) return Fail(f.name + ": ack", acked);
  if (auto final_batch = s->GetBatch(id, /*task_stats=*/true); final_batch.ok()) report.Progress(*final_batch);
  const absl::Time end = absl::Now();
  std::cerr << (tty ? "\r" : "") << report.Line(end, tty ? 24 : 0) << (tty ? "\033[K\n" : "\n");
  if (!st.ok()) return Fail(f.name + ": results", FromGrpcStatus(st));
  if (!f.eval) {
    std::cout << "\n" << report.Summary(end);
  } else if (f.json) {
    std::cout << tally.Json(f.ks) << "\n";
  } else {
    std::cout << "\n" << tally.Table(f.ks);
  }
  if (!f.out.empty() && !f.json) std::cout << "\nresults: " << f.out << "\n";
  // On the local cluster, where to look at the episodes themselves.
  const std::string http = f.conn.address.empty() ? LocalClusterAddress(f.conn.cluster_dir, "scheduler", "http") : "";
  if (!http.empty()) {
    // The local cluster's secret puts the cluster token in the link, as `corral ui` does.
    std::string secret = f.conn.secret_file;
    if (secret.empty() && std::filesystem::exists(f.conn.cluster_dir + "/secret"))
      secret = f.conn.cluster_dir + "/secret";
    if (auto link = InspectorLink("http://" + http, secret, id, ""); link.ok()) {
      (f.json ? std::cerr : std::cout) << "inspect: " << *link << "\n";
    }
  }
  return interrupts.interrupted() ? 130 : 0;
}

}  // namespace

void RegisterRun(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<RunFlags>();
  CLI::App* run = app.add_subcommand(
      "run", "run a dataset on the cluster: submit, show live progress, print a summary (Ctrl-C cancels)");
  AddConnectFlags(run, f->conn, "scheduler", "--scheduler", "scheduler");
  AddBatchFlags(run, f->batch);
  run->add_option("--out", f->out, "write every result, with its trajectory, as JSON lines to this file");
  run->add_flag("--no-ack", f->no_ack, "leave results unacknowledged (for another consumer)");
  run->add_flag("--dry-run", f->dry_run,
                "print the tasks as they would be submitted, one JSON line each, and submit nothing");
  run->add_option("--progress-every", f->progress_every_s, "seconds between progress lines when not on a terminal")
      ->capture_default_str();
  run->callback([f, &exit_code] { exit_code = Run(*f); });

  auto e = std::make_shared<RunFlags>();
  e->eval = true;
  e->name = "eval";
  CLI::App* eval = app.add_subcommand(
      "eval",
      "evaluate an agent: k attempts per task of a dataset or Harbor tasks, then pass@1 and pass@k per task "
      "and overall (live progress as corral run; Ctrl-C cancels)");
  AddConnectFlags(eval, e->conn, "scheduler", "--scheduler", "scheduler");
  AddBatchFlags(eval, e->batch);
  eval->add_option("-k,--attempts", e->batch.group_size, "attempts per task (the largest k reported)")
      ->check(CLI::Range(1, 1024));
  eval->add_option("--pass-at", e->ks, "the k values to report (default: 1 and the attempts)")->delimiter(',');
  eval->add_option("--pass-threshold", e->pass_threshold, "an attempt passes with a reward at or above this")
      ->capture_default_str();
  eval->add_flag("--json", e->json, "print the scores as one JSON object on stdout (progress stays on stderr)");
  eval->add_option("--out", e->out, "write every result, with its trajectory, as JSON lines to this file");
  eval->add_option("--progress-every", e->progress_every_s, "seconds between progress lines when not on a terminal")
      ->capture_default_str();
  eval->callback([e, &exit_code] {
    const int n = static_cast<int>(e->batch.group_size);
    if (e->ks.empty()) e->ks = n > 1 ? std::vector<int>{1, n} : std::vector<int>{1};
    for (int k : e->ks) {
      if (k < 1 || k > n) {
        std::cerr << "corral eval: --pass-at " << k << " needs 1 <= k <= the attempts (" << n << ")\n";
        exit_code = 2;
        return;
      }
    }
    exit_code = Run(*e);
  });
}

}  // namespace corral::cli
