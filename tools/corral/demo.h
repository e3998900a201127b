// `corral up --demo`: short demos that exercise a running cluster end to end.
#pragma once

#include <string>

namespace corral::cli {

// Six workers contend for a 2-permit limit on the ratelimiter at `address`; prints who got a permit when,
// and returns 0 if every worker was served in arrival order with never more than 2 holders at once.
int RunRateLimiterDemo(const std::string& address, const std::string& token);

}  // namespace corral::cli
