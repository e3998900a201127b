// A uid of its own per test case: ctest runs test cases in parallel processes, and each sweeps its uid.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

#include "gtest/gtest.h"

namespace corral::sandbox {

inline uid_t TestUid() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return 21000 + static_cast<uid_t>(std::hash<std::string>()(std::string(info->test_suite_name()) + "." + info->name()) %
                                    8000);
}

}  // namespace corral::sandbox
