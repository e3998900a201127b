// `corral audit DATASET|TASK_DIR`: runs the exploit battery (audit.h) against every agent task's verifier on the
// cluster, prints what earned a reward it should not have, and with --quarantine writes the flagged task ids
// (which `corral run --skip` and the SDK's `skip` leave out). Exits 1 when a task is flagged.
#include <fstream>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "libs/rpc/status_conversion.h"
#include "tools/corral/audit.h"
#include "tools/corral/commands.h"
#include "tools/corral/output.h"
#include "tools/corral/scheduler_client.h"

namespace corral::cli {
namespace {

struct AuditFlags {
  ConnectFlags conn;
  BatchFlags batch;
  std::string quarantine;
};

int Audit(const AuditFlags& f) {
  BatchFlags input = f.batch;
  if (input.agent.empty()) input.agent = "true";  // Harbor tasks need an agent to load; each exploit replaces it
  auto tasks = LoadBatchTasks(input);
  if (!tasks.ok()) return Fail("audit", tasks.status());
  const AuditPlan plan = PlanAudit(*tasks);
  if (plan.tasks.empty()) {
    for (const std::string& s : plan.skipped) std::cout << "skipped " << s << "\n";
    std::cout << "no agent task to audit\n";
    return 0;
  }
  AuditFlags flags = f;
  auto s = ConnectScheduler(flags.conn);
  if (!s.ok()) return Fail("audit", s.status());
  v1::BatchSpec spec = f.batch.Spec();
  spec.set_group_size(1);
  auto batch = s->Submit(spec, plan.tasks);
  if (!batch.ok()) return Fail("audit", batch.status());
  const size_t audited = plan.tasks.size() / Exploits().size();
  std::cerr << "corral audit: batch " << batch->batch_id() << ": " << audited << " task(s) x " << Exploits().size()
            << " agents (the do-nothing one and " << Exploits().size() - 1 << " exploits)\n";
  std::vector<v1::EpisodeResult> results;
  grpc::ClientContext ctx;
  s->Prepare(ctx, /*deadline=*/false);
  v1::StreamResultsRequest req;
  req.set_batch_id(batch->batch_id());
  req.set_exclude_trajectories(true);
  auto reader = s->stub->StreamResults(&ctx, req);
  v1::StreamResultsResponse msg;
  std::vector<std::string> to_ack;
  while (reader->Read(&msg)) {
    if (!msg.has_result()) continue;
    results.push_back(msg.result());
    to_ack.push_back(msg.result().ids().episode_id());
    if (results.size() % 10 == 0 || results.size() == plan.tasks.size()) {
      std::cerr << "corral audit: " << results.size() << "/" << plan.tasks.size() << " episodes ended\n";
    }
  }
  if (const grpc::Status st = reader->Finish(); !st.ok()) return Fail("audit: results", FromGrpcStatus(st));
  if (absl::Status acked = s->Ack(to_ack); !acked.ok()) return Fail("audit: ack", acked);
  const std::vector<TaskAudit> audits = JudgeAudit(results);
  std::cout << AuditReport(audits, plan.skipped);
  bool flagged = false;
  for (const TaskAudit& a : audits) flagged = flagged || a.flagged();
  if (!f.quarantine.empty()) {
    std::ofstream out(f.quarantine, std::ios::trunc);
    if (!out) return Fail("audit", absl::NotFoundError(absl::StrCat("cannot write ", f.quarantine)));
    out << "# corral audit of " << f.batch.input << ": tasks an agent can be rewarded on without doing them\n";
    for (const TaskAudit& a : audits) {
      if (a.flagged()) out << a.task_id << "\n";
    }
    std::cout << "quarantine: " << f.quarantine << " (corral run --skip " << f.quarantine << ")\n";
  }
  return flagged ? 1 : 0;
}

}  // namespace

void RegisterAudit(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<AuditFlags>();
  CLI::App* audit = app.add_subcommand(
      "audit",
      "hunt exploitable tasks: run a do-nothing agent and a battery of scripted exploits (planted rewards, "
      "background writers, shadowed modules, conftest.py, git hooks, dotfiles, replaced interpreters, the answer) "
      "against every agent task's verifier; report each exploit rewarded above the do-nothing agent (exit 1 when "
      "one is)");
  AddConnectFlags(audit, f->conn, "scheduler", "--scheduler", "scheduler");
  AddBatchFlags(audit, f->batch);
  audit->add_option("--quarantine", f->quarantine,
                    "write the flagged task ids to this file, one per line (corral run --skip FILE leaves them out)");
  audit->callback([f, &exit_code] { exit_code = Audit(*f); });
}

}  // namespace corral::cli
