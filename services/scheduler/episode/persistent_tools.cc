#include "services/scheduler/episode/persistent_tools.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "services/scheduler/episode/episode_calls.h"
#include "services/scheduler/episode/resident_process.h"

namespace corral::scheduler {
namespace {

namespace asio = boost::asio;

}  // namespace

asio::awaitable<std::variant<std::string, Failure>> RunPersistent(Attempt& a, const v1::ToolSpec& spec,
                                                                  const std::string& code, absl::Duration timeout,
                                                                  size_t limit) {
  using Out = std::variant<std::string, Failure>;
  const bool bash = spec.kind() == v1::TOOL_KIND_BASH;
  ResidentProcesses::Entry session;
  if (const ResidentProcesses::Entry* found = a.residents.Find(spec.name()); found != nullptr) {
    session = *found;
  } else {
    ResidentSpec start;
    start.key = spec.name();
    if (bash) {
      for (const char* arg : {"bash", "--noprofile", "--norc", "-c"}) start.command.add_argv(arg);
      start.command.add_argv(EpisodeScript("persistent_bash.sh"));
    } else {
      for (const char* arg : {"python3", "-u", "-c"}) start.command.add_argv(arg);
      start.command.add_argv(EpisodeScript("persistent_python.py"));
    }
    start.marker = RandomMarker("__CORRAL_DONE_");
    (*start.command.mutable_env())["__CORRAL_MARK"] = start.marker;
    // A branching task's session is carried into its branches, variables and all.
    start.command.set_fork_ready(a.ticket.branch_plan.has_value());
    start.phase = v1::EPISODE_PHASE_TOOL;
    start.what = absl::StrCat("the ", spec.name(), " session");
    auto started = co_await StartResident(a, start);
    if (auto* f = std::get_if<Failure>(&started)) co_return Out(*f);
    session = std::get<ResidentProcesses::Entry>(std::move(started));
  }
  std::shared_ptr<sandbox::InteractiveProcess> process = session.process;
  const std::string marker = session.marker;
  async::ScopedInterrupt interrupt(a.control(), [process] { process->Stop(); });
  std::string input = code;
  input.erase(std::remove(input.begin(), input.end(), '\0'), input.end());
  process->Write(input + std::string(1, '\0'));
  sandbox::InteractiveProcess::Output out = co_await process->ReadUntil(marker, a.clock->Now() + timeout);
  std::string text = out.text;
  std::string note;
  bool replace = false;
  if (!out.marked && !out.ended) {
    process->Signal(2);  // SIGINT: the call's command, not the session
    sandbox::InteractiveProcess::Output rest = co_await process->ReadUntil(marker, a.clock->Now() + absl::Seconds(5));
    text += rest.text;
    if (rest.marked) {
      note = absl::StrCat("\n[the call timed out after ", absl::FormatDuration(timeout), " and was interrupted]");
      out.marked = true;
    } else {
      note = absl::StrCat("\n[the call timed out after ", absl::FormatDuration(timeout),
                          "; the session did not recover and was restarted: its state is lost]");
      replace = true;
    }
  }
  if (out.ended && !out.marked) {
    if (a.control()->stopped()) co_return Out(StoppedFailure(a, v1::EPISODE_PHASE_TOOL, spec.name()));
    note = "\n[the process exited; the next call starts a new one]";
    replace = true;
  }
  if (replace) a.residents.Stop(spec.name());
  if (bash) {
    // The driver ends each call with "\n__CORRAL_STATUS <code>\n".
    const size_t at = text.rfind("\n__CORRAL_STATUS ");
    if (at != std::string::npos) {
      int status = 0;
      const std::string digits = text.substr(at + 17, text.find('\n', at + 1) - at - 17);
      if (absl::SimpleAtoi(digits, &status) && status != 0 && note.empty())
        note = absl::StrCat("\n[exit code ", status, "]");
      text.erase(at);
    }
  }
  while (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty() && text.front() == '\n') text.erase(0, 1);
  sandbox::OutputTail tail(limit);
  tail.Append(text);
  a.output.Append(text.size() > 1024 ? text.substr(text.size() - 1024) : text);
  co_return Out(tail.Text() + note);
}

}  // namespace corral::scheduler
