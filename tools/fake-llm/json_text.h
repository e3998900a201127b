// Reading request bodies in the fake: a string member (empty when absent or not a string), and a message's text
// (a string, or the "text" of each part of an array, `between` the parts).
#pragma once

#include <string>

#include "boost/json.hpp"

namespace corral::fakellm {

inline std::string Str(const boost::json::value* v) {
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : "";
}

inline std::string ContentText(const boost::json::value* content, const char* between = "") {
  if (content == nullptr) return "";
  if (content->is_string()) return std::string(content->as_string());
  std::string text;
  if (content->is_array()) {
    for (const auto& part : content->as_array()) {
      if (!part.is_object()) continue;
      if (!text.empty()) text += between;
      text += Str(part.as_object().if_contains("text"));
    }
  }
  return text;
}

}  // namespace corral::fakellm
