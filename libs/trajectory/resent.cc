#include "libs/trajectory/resent.h"

#include "absl/strings/ascii.h"
#include "boost/json.hpp"

namespace corral {

namespace json = boost::json;

namespace {

// The same JSON value, whatever its spelling (spaces, key order, escapes, number forms).
bool SameJson(const std::string& a, const std::string& b) {
  boost::system::error_code ea, eb;
  const json::value va = json::parse(a, ea);
  const json::value vb = json::parse(b, eb);
  return !ea && !eb && va == vb;
}

}  // namespace

bool IsResent(const v1::ChatMessage& sampled, const v1::ChatMessage& sent, std::vector<std::string>* changes,
              absl::flat_hash_map<std::string, std::string>* ids) {
  if (sampled.role() != "assistant" || sent.role() != "assistant" || sampled.name() != sent.name()) return false;
  if (sampled.tool_call_id() != sent.tool_call_id()) return false;
  std::vector<std::string> found;
  if (sampled.content() != sent.content()) {
    if (absl::StripAsciiWhitespace(sampled.content()) != absl::StripAsciiWhitespace(sent.content())) return false;
    found.push_back("content whitespace");
  }
  if (sampled.content_parts_json().empty() != sent.content_parts_json().empty() ||
      (!sampled.content_parts_json().empty() && !SameJson(sampled.content_parts_json(), sent.content_parts_json()))) {
    found.push_back("content parts");
  }
  if (sampled.reasoning_content() != sent.reasoning_content()) {
    if (!sent.reasoning_content().empty()) return false;
    found.push_back("reasoning left out");
  }
  if (sampled.tool_calls_size() != sent.tool_calls_size()) return false;
  absl::flat_hash_map<std::string, std::string> renamed;
  bool reencoded = false;
  for (int i = 0; i < sampled.tool_calls_size(); ++i) {
    const v1::ToolCall& a = sampled.tool_calls(i);
    const v1::ToolCall& b = sent.tool_calls(i);
    if (a.function_name() != b.function_name()) return false;
    if (a.type() != b.type() && !a.type().empty() && !b.type().empty()) return false;
    if (a.arguments() != b.arguments()) {
      if (!SameJson(a.arguments(), b.arguments())) return false;
      reencoded = true;
    }
    if (a.id() != b.id()) renamed[b.id()] = a.id();
  }
  if (reencoded) found.push_back("arguments re-encoded");
  if (!renamed.empty()) found.push_back("tool-call ids");
  changes->insert(changes->end(), found.begin(), found.end());
  for (auto& [from, to] : renamed) (*ids)[from] = to;
  return true;
}

json::object OpenAiMessage(const v1::ChatMessage& message) {
  json::object m;
  m["role"] = message.role();
  boost::system::error_code ec;
  json::value parts;
  if (!message.content_parts_json().empty()) parts = json::parse(message.content_parts_json(), ec);
  if (!message.content_parts_json().empty() && !ec) {
    m["content"] = std::move(parts);
  } else {
    m["content"] = message.content();
  }
  if (!message.reasoning_content().empty()) m["reasoning_content"] = message.reasoning_content();
  if (!message.name().empty()) m["name"] = message.name();
  if (!message.tool_call_id().empty()) m["tool_call_id"] = message.tool_call_id();
  if (!message.tool_calls().empty()) {
    json::array calls;
    for (const v1::ToolCall& tc : message.tool_calls()) {
      calls.push_back(
          json::object{{"id", tc.id()},
                       {"type", tc.type().empty() ? "function" : tc.type()},
                       {"function", json::object{{"name", tc.function_name()}, {"arguments", tc.arguments()}}}});
    }
    m["tool_calls"] = std::move(calls);
  }
  return m;
}

}  // namespace corral
