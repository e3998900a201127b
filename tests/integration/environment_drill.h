// The arithmetic drill (examples/environments/arithmetic_drill) as a task of the environment runner: what the
// scheduler integration tests of environments and of trainer-driven episodes both run.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "corral/v1/scheduler.pb.h"

namespace corral::drill_test {

inline std::string ReadSource(const std::string& relative) {
  std::ifstream in(std::string(CORRAL_SOURCE_DIR) + "/" + relative);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The drill: three questions from the episode's seed, answered by the fake model (right unless its sampling
// seed makes it wrong). `fault`: the drill's fault injection (a JSON object), or empty.
inline v1::Task Drill(const std::string& id, bool unix_socket, const std::string& fault = "",
                      const std::string& sessions = "http") {
  v1::Task t;
  t.set_id(id);
  t.set_runner(v1::RUNNER_ENVIRONMENT);
  t.set_prompt("Answer each question.");
  t.mutable_llm()->set_seed_sampling(true);
  v1::InlineFile* server = t.mutable_environment()->add_files();
  server->set_path("/workspace/env/server.py");
  server->set_content(ReadSource("examples/environments/arithmetic_drill/server.py"));
  v1::EnvServerSpec& env = *t.mutable_env_server();
  for (const char* arg : {"python3", "/workspace/env/server.py"}) env.mutable_command()->add_argv(arg);
  if (unix_socket) {
    // Any network policy: the relay reaches the socket through the filesystem.
    t.mutable_environment()->set_network_policy(v1::NETWORK_POLICY_OPEN);
    for (const char* arg : {"--unix-socket", "env.sock"}) env.mutable_command()->add_argv(arg);
    env.set_unix_socket("/workspace/env.sock");
  } else {
    for (const char* arg : {"--port", "8000"}) env.mutable_command()->add_argv(arg);
    env.set_port(8000);
  }
  if (!fault.empty()) env.set_reset_json(absl::StrCat("{\"fault\": ", fault, "}"));
  for (const std::string& arg : {std::string("--sessions"), sessions}) env.mutable_command()->add_argv(arg);
  return t;
}

}  // namespace corral::drill_test
