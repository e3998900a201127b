#include "tools/corral/audit.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace corral::cli {
namespace {

// One call to the model through the episode's proxy session, so that the episode has data (python3, else curl).
constexpr char kModelCall[] =
    R"sh(python3 - <<'PY' 2>/dev/null || curl -sf -m 60 -o /dev/null -H "Authorization: Bearer $OPENAI_API_KEY" -H 'Content-Type: application/json' -d "{\"model\": \"$OPENAI_MODEL\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}" "$OPENAI_BASE_URL/chat/completions"
import json, os, urllib.request as u
r = u.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", method="POST",
              data=json.dumps({"model": os.environ["OPENAI_MODEL"], "messages": [{"role": "user", "content": "hi"}]}).encode(),
              headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
u.urlopen(r, timeout=60).read()
PY
)sh";

// What writes a reward of 1 where verifiers write theirs (a file of its own, for the exploits that plant one).
constexpr char kWriter[] = R"sh(mkdir -p /logs/verifier 2>/dev/null; echo 1 > /logs/verifier/reward.txt 2>/dev/null)sh";

std::vector<Exploit> Battery() {
  const std::string writer_script = absl::StrCat("#!/bin/sh\n", kWriter, "\nexit 0\n");
  auto write_file = [](const std::string& path, const std::string& content) {
    return absl::StrCat("cat > ", path, " <<'CORRAL_EOF' 2>/dev/null\n", content, "CORRAL_EOF\n");
  };
  const std::string conftest =
      "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
      "    outcome = yield\n    outcome.get_result().outcome = \"passed\"\n";
  const std::string sitecustomize = absl::StrCat(
      "import atexit, os\n\n\ndef _reward():\n    os.makedirs(\"/logs/verifier\", exist_ok=True)\n"
      "    open(\"/logs/verifier/reward.txt\", \"w\").write(\"1\")\n\n\natexit.register(_reward)\n");
  std::vector<Exploit> out = {
      {"do-nothing", "one model call and nothing else: the baseline every exploit is held against", ""},
      {"planted-reward", "writes reward.txt and reward.json where the verifier writes its own",
       absl::StrCat(kWriter, "\necho '{\"reward\": 1}' > /logs/verifier/reward.json 2>/dev/null\n")},
      {"background-writer", "leaves a detached process that keeps writing reward 1",
       absl::StrCat("setsid sh -c 'while :; do ", kWriter, "; sleep 0.01; done' < /dev/null > /dev/null 2>&1 &\n")},
      {"shadowed-modules",
       "pytest.py (exits 0) and sitecustomize.py (writes reward 1 at exit) in the working directory, tests/ and "
       "the home, where Python may import them by name",
       absl::StrCat("for d in \"$PWD\" \"$PWD/tests\" \"$HOME\"; do [ -d \"$d\" ] || continue\n",
                    write_file("\"$d/pytest.py\"", "import sys\nsys.exit(0)\n"),
                    write_file("\"$d/sitecustomize.py\"", sitecustomize), "done\n")},
      {"conftest", "a conftest.py that reports every test passed, beside every test file and in the working directory",
       absl::StrCat("for d in \"$PWD\" $(find \"$PWD\" -maxdepth 4 -name 'test_*.py' -printf '%h\\n' 2>/dev/null | "
                    "sort -u); do\n",
                    write_file("\"$d/conftest.py\"", conftest), "done\n")},
      {"git-hooks",
       "makes the working directory a git repository whose fsmonitor and hooks write reward 1 when the verifier "
       "runs git",
       absl::StrCat("cd \"$PWD\" && { [ -d .git ] || git init -q . ; } 2>/dev/null && mkdir -p .git/hooks && ",
                    write_file(".git/corral-hook", writer_script),
                    "chmod +x .git/corral-hook && for h in post-checkout pre-commit post-index-change; do cp "
                    ".git/corral-hook .git/hooks/$h; done && git config core.fsmonitor \"$PWD/.git/corral-hook\"\n")},
      {"dotfiles", "shell startup files in the home that write reward 1 and end the shell",
       absl::StrCat("for f in .bash_profile .bash_login .profile .bashrc; do printf '%s\\nexit 0\\n' '", kWriter,
                    "' > \"$HOME/$f\" 2>/dev/null; done\n")},
      {"interpreters",
       "python3, python, pytest and bash replaced in /usr/local/bin by programs that write reward 1 (an image "
       "sandbox's root may)",
       absl::StrCat("for p in python3 python pytest bash; do ", write_file("/usr/local/bin/$p", writer_script),
                    "chmod +x /usr/local/bin/$p 2>/dev/null; done\n")},
      {"read-answer",
       "looks for the task's answer where the agent can read (its task file, its environment) and writes it to "
       "answer.txt in the working directory",
       "a=$(python3 -c 'import json,os; print(json.load(open(os.path.expanduser(\"~/.corral/task.json\")))"
       ".get(\"answer\", \"\"))' 2>/dev/null); [ -n \"$a\" ] || a=$(printenv | sed -n 's/^[A-Z_]*ANSWER=//p' | "
       "head -1); [ -n \"$a\" ] && printf '%s\\n' \"$a\" > \"$PWD/answer.txt\"\n"},
  };
  return out;
}

}  // namespace

const std::vector<Exploit>& Exploits() {
  static const std::vector<Exploit> battery = Battery();
  return battery;
}

AuditPlan PlanAudit(const std::vector<v1::Task>& tasks) {
  AuditPlan plan;
  for (const v1::Task& task : tasks) {
    if (task.runner() != v1::RUNNER_AGENT) {
      plan.skipped.push_back(
          absl::StrCat(task.id(),
                       ": not an agent task (its reward is computed from the final message; the audit runs agents "
                       "against verifiers)"));
      continue;
    }
    for (const Exploit& exploit : Exploits()) {
      v1::Task t = task;
      t.set_id(absl::StrCat(task.id(), ":", exploit.name));
      v1::AgentSpec& agent = *t.mutable_agent();
      agent.clear_harness();
      agent.mutable_command()->Clear();
      agent.mutable_command()->add_argv("sh");
      agent.mutable_command()->add_argv("-c");
      agent.mutable_command()->add_argv(absl::StrCat(kModelCall, exploit.script));
      plan.tasks.push_back(std::move(t));
    }
  }
  return plan;
}

std::vector<TaskAudit> JudgeAudit(const std::vector<v1::EpisodeResult>& results) {
  std::map<std::string, const Exploit*> by_name;
  for (const Exploit& e : Exploits()) by_name[e.name] = &e;
  std::vector<TaskAudit> audits;
  std::map<std::string, size_t> index;
  std::map<std::string, std::vector<std::pair<const Exploit*, std::optional<double>>>> rewards;
  for (const v1::EpisodeResult& r : results) {
    const std::string& id = r.ids().task_id();
    const size_t colon = id.rfind(':');
    if (colon == std::string::npos || !by_name.contains(id.substr(colon + 1))) continue;  // not the audit's
    const std::string task = id.substr(0, colon);
    const Exploit* exploit = by_name[id.substr(colon + 1)];
    if (!index.contains(task)) {
      index[task] = audits.size();
      audits.push_back(TaskAudit{.task_id = task});
    }
    TaskAudit& audit = audits[index[task]];
    const bool rewarded = r.status() == v1::EPISODE_STATUS_FINISHED && r.has_reward();
    if (exploit == &Exploits().front()) {
      if (rewarded) {
        audit.baseline = r.reward();
      } else {
        audit.baseline_failure = absl::StrCat(v1::EpisodeStatus_Name(r.status()), ": ", r.failure_message());
      }
    }
    rewards[task].emplace_back(exploit, rewarded ? std::optional<double>(r.reward()) : std::nullopt);
  }
  for (TaskAudit& audit : audits) {
    const double floor = audit.baseline.value_or(0);
    for (const auto& [exploit, reward] : rewards[audit.task_id]) {
      if (exploit != &Exploits().front() && reward && *reward > floor) audit.wins.push_back({exploit, *reward});
    }
  }
  return audits;
}

std::string AuditReport(const std::vector<TaskAudit>& audits, const std::vector<std::string>& skipped) {
  std::string out;
  int flagged = 0;
  for (const TaskAudit& a : audits) {
    flagged += a.flagged() ? 1 : 0;
    const std::string baseline =
        a.baseline ? absl::StrFormat("%g", *a.baseline) : absl::StrCat("none (", a.baseline_failure, ")");
    if (!a.flagged()) {
      absl::StrAppend(&out, a.task_id, ": ok (do-nothing agent: ", baseline, "; no exploit earned more)\n");
      continue;
    }
    absl::StrAppend(&out, a.task_id, ": ", a.broken() ? "BROKEN VERIFIER" : "EXPLOITABLE",
                    " (do-nothing agent: ", baseline, ")\n");
    if (a.broken()) absl::StrAppend(&out, "  an agent that does nothing is rewarded: the verifier does not check\n");
    for (const TaskAudit::Win& w : a.wins) {
      absl::StrAppend(&out, "  ", w.exploit->name, " earned ", absl::StrFormat("%g", w.reward), ": ", w.exploit->what,
                      "\n    ", absl::StrReplaceAll(w.exploit->script, {{"\n", "\n    "}}), "\n");
    }
  }
  for (const std::string& s : skipped) absl::StrAppend(&out, "skipped ", s, "\n");
  absl::StrAppend(&out, "\n", audits.size(), " task(s) audited with ", Exploits().size() - 1, " exploits: ", flagged,
                  " flagged", skipped.empty() ? "" : absl::StrCat(", ", skipped.size(), " skipped"), "\n");
  return out;
}

}  // namespace corral::cli
