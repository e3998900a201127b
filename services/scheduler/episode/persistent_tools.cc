#include "services/scheduler/episode/persistent_tools.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "libs/api/proto_time.h"
#include "openssl/rand.h"

namespace corral::scheduler {
namespace {

namespace asio = boost::asio;

// Commands run by `eval` in the shell itself, stdin from /dev/null (stdin is the command channel).
constexpr char kBashDriver[] = R"sh(
__corral_mark=$__CORRAL_MARK; unset __CORRAL_MARK
trap 'printf "\n[interrupted]\n"' INT
while IFS= read -r -d '' __corral_cmd; do
  eval "$__corral_cmd" < /dev/null 2>&1
  printf '\n__CORRAL_STATUS %d\n%s\n' "$?" "$__corral_mark"
done
)sh";

constexpr char kPythonDriver[] = R"py(
import ast, os, sys, traceback
mark = os.environ.pop("__CORRAL_MARK")
sys.stderr = sys.stdout
g = {"__name__": "__main__", "__builtins__": __builtins__}
inp = sys.stdin.buffer
def cell():
    data = bytearray()
    while True:
        b = inp.read(1)
        if not b:
            return None
        if b == b"\0":
            return data.decode("utf-8", "replace")
        data += b
while True:
    try:
        src = cell()
    except KeyboardInterrupt:
        continue
    if src is None:
        break
    try:
        tree = ast.parse(src, "<cell>", "exec")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, "<cell>", "exec"), g)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), g)
            if value is not None:
                print(repr(value))
    except KeyboardInterrupt:
        print("[interrupted]")
    except BaseException:
        traceback.print_exc()
    sys.stdout.write("\n" + mark + "\n")
    sys.stdout.flush()
)py";

}  // namespace

std::string RandomMarker(const std::string& prefix) {
  unsigned char raw[12];
  RAND_bytes(raw, sizeof raw);
  std::string hex;
  for (unsigned char c : raw) absl::StrAppend(&hex, absl::Hex(c, absl::kZeroPad2));
  return absl::StrCat(prefix, hex, "__");
}

void StopPersistent(Attempt& a) {
  for (auto& [name, p] : a.tool_processes) p.process->Stop();
  a.tool_processes.clear();
}

asio::awaitable<std::variant<std::string, Failure>> RunPersistent(Attempt& a, const v1::ToolSpec& spec,
                                                                  const std::string& code, absl::Duration timeout,
                                                                  size_t limit) {
  using Out = std::variant<std::string, Failure>;
  const bool bash = spec.kind() == v1::TOOL_KIND_BASH;
  auto it = a.tool_processes.find(spec.name());
  if (it == a.tool_processes.end()) {
    v1::ExecRequest start;
    start.set_sandbox_id(a.sandbox_id);
    v1::Command& command = *start.mutable_command();
    if (bash) {
      for (const char* arg : {"bash", "--noprofile", "--norc", "-c", kBashDriver}) command.add_argv(arg);
    } else {
      for (const char* arg : {"python3", "-u", "-c", kPythonDriver}) command.add_argv(arg);
    }
    command.set_cwd(a.workdir);
    const std::string marker = RandomMarker("__CORRAL_DONE_");
    (*command.mutable_env())["__CORRAL_MARK"] = marker;
    const absl::Duration life = std::min(a.EpisodeDeadline() - a.clock->Now(), a.slot->max_exec_timeout);
    ToProto(std::max(life, absl::Seconds(1)), command.mutable_timeout());
    auto started = co_await a.slot->client->StartInteractive(std::move(start));
    if (!started.ok()) {
      co_return Out(a.FromStatus(started.status(), v1::EPISODE_PHASE_TOOL, v1::FAILURE_CLASS_INFRA,
                                 absl::StrCat("starting the ", spec.name(), " session")));
    }
    it = a.tool_processes.emplace(spec.name(), Attempt::ToolProcess{*std::move(started), marker}).first;
  }
  std::shared_ptr<InteractiveProcess> process = it->second.process;
  const std::string marker = it->second.marker;
  ScopedInterrupt interrupt(a.control(), [process] { process->Stop(); });
  std::string input = code;
  input.erase(std::remove(input.begin(), input.end(), '\0'), input.end());
  process->Write(input + std::string(1, '\0'));
  InteractiveProcess::Output out = co_await process->ReadUntil(marker, a.clock->Now() + timeout);
  std::string text = out.text;
  std::string note;
  bool replace = false;
  if (!out.marked && !out.ended) {
    process->Signal(2);  // SIGINT: the call's command, not the session
    InteractiveProcess::Output rest = co_await process->ReadUntil(marker, a.clock->Now() + absl::Seconds(5));
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
    if (a.control()->stopped())
      co_return Out(
          a.FromStatus(absl::CancelledError("stopped"), v1::EPISODE_PHASE_TOOL, v1::FAILURE_CLASS_INFRA, spec.name()));
    note = "\n[the process exited; the next call starts a new one]";
    replace = true;
  }
  if (replace) {
    process->Stop();
    a.tool_processes.erase(spec.name());
  }
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
  OutputTail tail(limit);
  tail.Append(text);
  a.output.Append(text.size() > 1024 ? text.substr(text.size() - 1024) : text);
  co_return Out(tail.Text() + note);
}

}  // namespace corral::scheduler
