// corral-fake-llm: an OpenAI-compatible scripted backend (test fixture and demo aid, never the product's
// logic). Serves /v1/chat/completions, /v1/completions, /v1/models and /health until SIGTERM.
#include <unistd.h>

#include "libs/core/config.h"
#include "libs/core/logging.h"
#include "libs/http/server.h"
#include "libs/process/supervise.h"
#include "libs/rpc/server_config.h"
#include "libs/rpc/server_runner.h"
#include "spdlog/spdlog.h"
#include "tools/fake-llm/fake_llm.h"

int main(int argc, char** argv) {
  corral::BlockShutdownSignals();
  corral::fakellm::Options options;
  std::string listen = "127.0.0.1:8000";
  std::string ready_file;
  int64_t threads = 2;
  corral::LogOptions log;
  corral::ConfigSchema schema("corral-fake-llm",
                              "An OpenAI-compatible scripted model backend for tests, benchmarks and demos. Per "
                              "request, a \"fake\" object in the body overrides: status, ttft_ms, inter_token_ms, "
                              "stall_after_chunks, disconnect_after_chunks, reply.");
  schema.String("listen", &listen, "HOST:PORT to serve HTTP on (port 0: the kernel chooses)");
  schema.StringList("models", &options.models, "model names served (the first is the default)");
  schema.String("reply", &options.reply, "fixed reply text (default: \"echo: <last user message>\")");
  schema.Duration("ttft", &options.ttft, "delay before the first token", absl::ZeroDuration(), absl::Hours(1));
  schema.Duration("inter_token", &options.inter_token, "delay between streamed tokens", absl::ZeroDuration(),
                  absl::Minutes(1));
  schema.Bool("arithmetic", &options.arithmetic,
              "solve \"A op B\" in the last user message: with tools, call the first one (code or command) and "
              "answer with its output; without, answer \"#### N\"; wrong by one for one seed in four");
  schema.Bool("shell_agent", &options.shell_agent,
              "drive an installed agent harness: call its shell tool (bash, shell, exec_command…) once with the "
              "command after \"RUN:\" in the task, then answer with the text after \"ANSWER:\"");
  schema.String("shell_agent_command", &options.shell_agent_command,
                "the command the shell agent runs when the task gives none after \"RUN:\" (default: none, it answers "
                "at once)");
  schema.Bool("native_responses", &options.native_responses,
              "serve POST /v1/responses itself (as vLLM and SGLang do): answered as a chat call, reshaped");
  schema.Bool("native_messages", &options.native_messages,
              "serve POST /v1/messages itself (as some servers do): answered as a chat call, reshaped");
  schema.Bool("native_gemini", &options.native_gemini,
              "serve Google's Gemini API itself (/v1beta/models/{model}:generateContent and "
              ":streamGenerateContent): answered as a chat call, reshaped");
  schema.Double("quota_rps", &options.quota_rps,
                "a provider's quota: completion requests per second (token bucket; 0 = none); beyond it HTTP 429 "
                "with Retry-After",
                0, 1e6);
  schema.Int("quota_burst", &options.quota_burst, "the quota's bucket size (requests at once)", 1, 1 << 30);
  schema.Int("quota_concurrency", &options.quota_concurrency,
             "a provider's quota: completions in flight at once (0 = none); beyond it HTTP 429", 0, 1 << 30);
  schema.Int("fail_first", &options.fail_first, "answer the first N completion requests with HTTP 500", 0, 1 << 30);
  schema.String("request_log", &options.request_log,
                "append each POST as {\"path\", \"body\"} on one line to this file (recording fixtures)");
  schema.Int("threads", &threads, "I/O threads", 1, 64);
  schema.String("ready_file", &ready_file, "write {\"pid\",\"http\"} here once serving (for supervisors and tests)");
  schema.String("log_level", &log.level, "trace, debug, info, warn, error, critical or off");
  if (auto exit_code = corral::HandleCommandLine(schema, argc, argv)) return *exit_code;
  if (auto s = corral::InitLogging("fake-llm", log); !s.ok()) {
    fprintf(stderr, "corral-fake-llm: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (options.models.empty()) options.models = {"fake-model"};
  corral::fakellm::FakeLlm backend(options);
  corral::http::HttpServer server(
      corral::http::ServerLimits{},
      [&](corral::http::Request& req, corral::http::Responder& res) { return backend.Handle(req, res); },
      static_cast<int>(threads));
  auto port = server.Listen(listen);
  if (!port.ok()) {
    spdlog::error("cannot start: {}", port.status());
    return 1;
  }
  const std::string address = listen.substr(0, listen.rfind(':')) + ":" + std::to_string(*port);
  spdlog::info("fake-llm serving http={} models={}", address, options.models.front());
  if (!ready_file.empty()) {
    corral::ReadyInfo info;
    info.pid = getpid();
    info.http = address;
    if (auto s = corral::WriteReadyFile(ready_file, "fake-llm", info); !s.ok()) spdlog::warn("{}", s);
  }
  corral::WaitForShutdownSignal();
  server.Stop();
  spdlog::info("fake-llm: stopped after {} requests", backend.requests());
  return 0;
}
