// A task's tool, as the scheduler's tests write one.
#pragma once

#include <string>

#include "corral/v1/scheduler.pb.h"

namespace corral::scheduler::testing_support {

inline v1::ToolSpec Tool(const std::string& name, v1::ToolKind kind) {
  v1::ToolSpec t;
  t.set_name(name);
  t.set_kind(kind);
  return t;
}

}  // namespace corral::scheduler::testing_support
