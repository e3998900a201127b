// Reading and writing JSON in the fake: a string member (empty when absent or not a string), a message's text
// (a string, or the "text" of each part of an array, `between` the parts), a chat message, a completion's message.
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

// A chat message with text content.
inline boost::json::object ChatMessage(const std::string& role, std::string content) {
  boost::json::object m;
  m["role"] = role;
  m["content"] = std::move(content);
  return m;
}

// The message of a chat completion's first choice (an empty object when there is none).
inline const boost::json::object& FirstMessage(const boost::json::object& completion) {
  static const boost::json::object kEmpty;
  const boost::json::value* choices = completion.if_contains("choices");
  if (choices == nullptr || !choices->is_array() || choices->as_array().empty()) return kEmpty;
  const boost::json::value* m = choices->as_array()[0].as_object().if_contains("message");
  return m != nullptr && m->is_object() ? m->as_object() : kEmpty;
}

// A chat function tool.
inline boost::json::object FunctionTool(const std::string& name, const boost::json::value* parameters) {
  boost::json::object fn;
  fn["name"] = name;
  if (parameters != nullptr) fn["parameters"] = *parameters;
  boost::json::object tool;
  tool["type"] = "function";
  tool["function"] = std::move(fn);
  return tool;
}

// The fake's chat body for a request in another API: its model and "fake" object, the messages and tools read.
inline boost::json::object ChatBody(const boost::json::object& request, boost::json::array messages,
                                    boost::json::array tools) {
  boost::json::object chat;
  chat["model"] = request.contains("model") ? request.at("model") : boost::json::value("");
  chat["messages"] = std::move(messages);
  if (!tools.empty()) chat["tools"] = std::move(tools);
  if (const boost::json::value* fake = request.if_contains("fake")) chat["fake"] = *fake;
  return chat;
}

}  // namespace corral::fakellm
