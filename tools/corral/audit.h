// `corral audit`: does a task's verifier reward an agent that did not do the task? For every agent task, a
// do-nothing agent (one model call, no work) and a battery of scripted exploits run against the task's own
// verifier, on the cluster as training would run them; an exploit that earns more than the do-nothing agent is a
// finding, and a do-nothing agent that earns anything is a broken verifier. Plain logic: the command around it
// is audit_command.cc.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "corral/v1/scheduler.pb.h"

namespace corral::cli {

// One scripted agent: `script` (sh) runs in the sandbox after one call to the model.
struct Exploit {
  std::string name;  // [a-z-]: the episode's task id is "<task id>:<name>"
  std::string what;  // in words, for the report
  std::string script;
};

// The battery, the do-nothing agent ("do-nothing") first.
const std::vector<Exploit>& Exploits();

// The audit's tasks: each agent task once per exploit, its agent replaced by the exploit (harness or command),
// the rest as it is; other tasks are `skipped`, each with why.
struct AuditPlan {
  std::vector<v1::Task> tasks;
  std::vector<std::string> skipped;  // "<task id>: <why>"
};
AuditPlan PlanAudit(const std::vector<v1::Task>& tasks);

// What the audit found for one task.
struct TaskAudit {
  std::string task_id;
  std::optional<double> baseline;  // the do-nothing agent's reward; unset when its episode ended without one
  std::string baseline_failure;    // why it has none
  struct Win {
    const Exploit* exploit = nullptr;
    double reward = 0;
  };
  std::vector<Win> wins;  // exploits rewarded above the baseline (0 when it has none)

  bool broken() const { return baseline.has_value() && *baseline > 0; }
  bool flagged() const { return broken() || !wins.empty(); }
};

// The audit's results (the episodes of PlanAudit's tasks), by task, in the order the tasks first appear.
std::vector<TaskAudit> JudgeAudit(const std::vector<v1::EpisodeResult>& results);

// The report for a person: every task's verdict, each finding with the exploit's script.
std::string AuditReport(const std::vector<TaskAudit>& audits, const std::vector<std::string>& skipped);

}  // namespace corral::cli
