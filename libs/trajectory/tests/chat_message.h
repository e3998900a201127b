// The chat messages the trajectory tests build their calls from.
#pragma once

#include <string>

#include "libs/trajectory/trajectory.h"

namespace corral::testing {

inline v1::ChatMessage Msg(const std::string& role, const std::string& content) {
  v1::ChatMessage m;
  m.set_role(role);
  m.set_content(content);
  return m;
}

}  // namespace corral::testing
