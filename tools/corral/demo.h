// `corral up --demo`: short demos that exercise a running cluster end to end.
#pragma once

#include <string>

namespace corral::cli {

// Six workers contend for a 2-permit limit on the ratelimiter at `address`; prints who got a permit when,
// and returns 0 if every worker was served in arrival order with never more than 2 holders at once.
int RunRateLimiterDemo(const std::string& address, const std::string& token);

// Creates two sandboxes on the host at `address`, runs a command in each, shows that one cannot see the
// other's files or processes, and deletes them. Returns 0 when every check held.
int RunSandboxDemo(const std::string& address, const std::string& token);

// Submits a batch of GRPO groups to the scheduler (tool_loop, agent and single_turn episodes when the cluster
// has sandboxes, single_turn only otherwise), streams the results whole group by whole group, acknowledges them
// and prints a summary. Returns 0 when every episode finished with token ids recorded.
int RunBatchDemo(const std::string& scheduler, const std::string& token, bool sandboxes);

// Posts verl's SandboxFusion request to the sandbox API at `http_address` (HOST:PORT); 0 when the code ran in its
// leased sandbox and printed what it should.
int RunCodeDemo(const std::string& http_address);

// Does what an e2b SDK program does first, on the wire, at the sandbox API at `http_address`: creates a sandbox
// with a key signed by `secret_file`, runs a command through its in-sandbox API (a Connect stream) and kills it.
// 0 when the command's output came back and the sandbox is gone.
int RunE2bDemo(const std::string& http_address, const std::string& secret_file);

}  // namespace corral::cli
