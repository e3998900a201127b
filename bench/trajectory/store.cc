// What the proxy's trajectory store costs per call in a long harness conversation, beside what the proxy does
// with every call anyway (parsing its JSON body). A harness re-sends the whole history each turn: turn t's prompt
// is a system prompt, the task, and t tool calls with their results, each tool call sent back re-encoded (as
// Claude Code and OpenCode do), with a title side call beside the first turn. Per call the store restores the
// model's messages (Restore), records the call (hashing every prompt message), and at the end the session is
// exported (roles settled, token views). Prints per-call p50/p99 at the conversation's end for both, the ratio,
// and the export time.
//   corral-bench-trajectory [TURNS] [ROUNDS]     (default 200 turns, 5 rounds)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "boost/json.hpp"
#include "libs/trajectory/resent.h"
#include "libs/trajectory/trajectory.h"

namespace {

using corral::RecordedCall;
using corral::TrajectoryStore;
namespace v1 = corral::v1;
using Clock = std::chrono::steady_clock;

v1::ChatMessage Msg(const std::string& role, const std::string& content) {
  v1::ChatMessage m;
  m.set_role(role);
  m.set_content(content);
  return m;
}

// The model's tool call at turn t (as sampled: spaced JSON) and as the harness sends it back (compact).
v1::ChatMessage ToolCall(int t, bool resent) {
  v1::ChatMessage m = Msg("assistant", "");
  v1::ToolCall* tc = m.add_tool_calls();
  tc->set_id(resent ? "toolu_" + std::to_string(t) : "call_" + std::to_string(t));
  tc->set_type("function");
  tc->set_function_name("bash");
  const std::string cmd = "grep -rn 'pattern " + std::to_string(t) + "' src/ | head -50";
  tc->set_arguments(resent ? R"({"command":")" + cmd + R"("})" : R"({"command": ")" + cmd + R"("})");
  return m;
}

v1::ChatMessage ToolResult(int t, bool resent) {
  v1::ChatMessage m = Msg("tool", std::string(1024, static_cast<char>('a' + t % 26)));
  m.set_tool_call_id(resent ? "toolu_" + std::to_string(t) : "call_" + std::to_string(t));
  return m;
}

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  const int turns = argc > 1 ? std::atoi(argv[1]) : 200;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  if (turns < 1 || rounds < 1) {
    std::fprintf(stderr, "usage: corral-bench-trajectory [TURNS>0] [ROUNDS>0]\n");
    return 2;
  }
  const int tail = std::max(1, turns / 10);  // the calls measured: the conversation's last tenth
  std::vector<double> parse_us, store_us, export_us;
  size_t body_bytes = 0;
  for (int round = 0; round < rounds; ++round) {
    TrajectoryStore store("bench");
    RecordedCall title;
    *title.add_prompt() = Msg("system", "You are a title generator. You output ONLY a thread title.");
    *title.add_prompt() = Msg("user", "fix the failing tests");
    *title.mutable_response() = Msg("assistant", "Fixing tests");
    store.Record(std::move(title));
    const v1::ChatMessage system = Msg("system", std::string(8192, 's'));
    for (int t = 0; t < turns; ++t) {
      // The request as the harness sends it: the history re-encoded.
      std::vector<v1::ChatMessage> prompt = {system, Msg("user", "fix the failing tests")};
      for (int k = 0; k < t; ++k) {
        prompt.push_back(ToolCall(k, /*resent=*/true));
        prompt.push_back(ToolResult(k, /*resent=*/true));
      }
      boost::json::array messages;
      for (const v1::ChatMessage& m : prompt) messages.push_back(corral::OpenAiMessage(m));
      const std::string body = boost::json::serialize(
          boost::json::object{{"model", "m"}, {"messages", std::move(messages)}, {"tools", boost::json::array{}}});
      body_bytes = body.size();

      const auto p0 = Clock::now();
      boost::json::value parsed = boost::json::parse(body);
      const auto p1 = Clock::now();
      RecordedCall call;
      std::vector<uint32_t> matched;
      store.Restore(prompt, &matched);
      for (v1::ChatMessage& m : prompt) *call.add_prompt() = std::move(m);
      *call.mutable_response() = ToolCall(t, /*resent=*/false);
      call.mutable_call()->set_tools_json(R"([{"type":"function","function":{"name":"bash"}}])");
      store.RecordKeeping(call, matched);
      const auto p2 = Clock::now();
      if (parsed.as_object().size() != 3) return 1;  // keeps the parse
      if (t >= turns - tail) {
        parse_us.push_back(Micros(p1 - p0));
        store_us.push_back(Micros(p2 - p1));
      }
    }
    const auto e0 = Clock::now();
    v1::Trajectory out;
    store.Export(v1::TRAJECTORY_FORMAT_TRAJECTORY, &out);
    export_us.push_back(Micros(Clock::now() - e0));
    if (out.calls_by_role().agent() != static_cast<uint32_t>(turns) || out.calls_by_role().auxiliary() != 1) {
      std::fprintf(stderr, "roles wrong: %s\n", out.calls_by_role().ShortDebugString().c_str());
      return 1;
    }
  }
  const double parse50 = Percentile(parse_us, 0.5), store50 = Percentile(store_us, 0.5);
  std::printf("%-34s %10s %10s\n", "per call, last tenth of the turns", "p50 us", "p99 us");
  std::printf("%-34s %10.1f %10.1f\n", "parse the request (the floor)", parse50, Percentile(parse_us, 0.99));
  std::printf("%-34s %10.1f %10.1f\n", "restore + record (the store)", store50, Percentile(store_us, 0.99));
  std::printf("export of the session: p50 %.1f ms (%d calls, one agent branch)\n", Percentile(export_us, 0.5) / 1000,
              turns + 1);
  std::printf(
      "RESULT trajectory turns=%d body_kib=%zu parse_p50_us=%.1f store_p50_us=%.1f store_over_parse=%.2f "
      "export_ms=%.1f\n",
      turns, body_bytes / 1024, parse50, store50, store50 / parse50, Percentile(export_us, 0.5) / 1000);
  return 0;
}
