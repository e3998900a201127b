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

// Opens a session on the proxy, runs a two-turn tool-using agent against it (in a proxy_only sandbox on
// `sandbox_host`, or locally when that is empty), closes the session and prints the trajectory. Returns 0 when
// both calls were recorded on one branch.
int RunProxyDemo(const std::string& proxy_grpc, const std::string& proxy_http, const std::string& sandbox_host,
                 const std::string& token, const std::string& work_dir);

}  // namespace corral::cli
