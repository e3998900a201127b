#include "services/scheduler/episode/env_protocol.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace corral::scheduler {

namespace json = boost::json;

namespace {

std::string Shorten(std::string s) {
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}

// The value at a dotted path of `root` ("observation.board"), or null.
const json::value* At(const json::object& root, absl::string_view path) {
  const json::object* o = &root;
  const json::value* v = nullptr;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    if (o == nullptr) return nullptr;
    v = o->if_contains(json::string_view(part.data(), part.size()));
    if (v == nullptr) return nullptr;
    o = v->if_object();
  }
  return v;
}

std::string AsText(const json::value& v) {
  if (v.is_string()) return std::string(v.as_string());
  return json::serialize(v);
}

// Replaces the strings "{{text}}", "{{tool}}" and "{{arguments}}" anywhere in `v`.
void Fill(json::value& v, const ChatReply& reply, const json::value& arguments) {
  if (v.is_string()) {
    const json::string& s = v.as_string();
    if (s == "{{text}}") {
      v = json::string(reply.content);
    } else if (s == "{{tool}}") {
      v = json::string(reply.tool_calls.empty() ? "" : reply.tool_calls.front().name);
    } else if (s == "{{arguments}}") {
      v = arguments;
    }
  } else if (v.is_array()) {
    for (auto& item : v.as_array()) Fill(item, reply, arguments);
  } else if (v.is_object()) {
    for (auto& [key, item] : v.as_object()) Fill(item, reply, arguments);
  }
}

}  // namespace

absl::StatusOr<EnvAnswer> ParseEnvAnswer(const std::string& call, const std::string& body) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("the environment's answer to ", call, ": ", what));
  };
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) return bad(absl::StrCat("is not JSON (", ec.message(), "): ", Shorten(body)));
  if (!v.is_object()) return bad(absl::StrCat("is not a JSON object: ", Shorten(body)));
  EnvAnswer out;
  out.raw = std::move(v.as_object());
  const json::value* observation = out.raw.if_contains("observation");
  if (observation == nullptr) return bad("the field 'observation' is missing");
  out.observation = *observation;
  if (const json::value* reward = out.raw.if_contains("reward"); reward != nullptr && !reward->is_null()) {
    if (!reward->is_number()) return bad(absl::StrCat("the field 'reward' is not a number: ", AsText(*reward)));
    const double r = reward->to_number<double>();
    if (!std::isfinite(r)) return bad("the field 'reward' is not finite");
    out.reward = r;
  }
  if (const json::value* done = out.raw.if_contains("done"); done != nullptr && !done->is_null()) {
    if (!done->is_bool()) return bad(absl::StrCat("the field 'done' is not a boolean: ", Shorten(AsText(*done))));
    out.done = done->as_bool();
  }
  return out;
}

std::string ResetBody(uint64_t seed, const std::string& episode_id, const std::string& reset_json) {
  json::object body;
  body["seed"] = seed;
  body["episode_id"] = episode_id;
  if (!reset_json.empty()) {
    boost::system::error_code ec;
    json::value extra = json::parse(reset_json, ec);
    if (!ec && extra.is_object()) {
      for (const auto& [key, value] : extra.as_object()) body[key] = value;
    }
  }
  return json::serialize(body);
}

std::string StepBody(const json::value& action) {
  json::object body;
  body["action"] = action;
  return json::serialize(body);
}

std::string ObservationText(const v1::EnvServerSpec& spec, const EnvAnswer& answer) {
  if (!spec.observation_template().empty()) {
    std::string out;
    absl::string_view rest = spec.observation_template();
    while (true) {
      const size_t open = rest.find("{{");
      const size_t close = open == absl::string_view::npos ? open : rest.find("}}", open + 2);
      if (close == absl::string_view::npos) break;
      absl::StrAppend(&out, rest.substr(0, open));
      const absl::string_view path = absl::StripAsciiWhitespace(rest.substr(open + 2, close - open - 2));
      if (const json::value* v = At(answer.raw, path); v != nullptr) absl::StrAppend(&out, AsText(*v));
      rest.remove_prefix(close + 2);
    }
    absl::StrAppend(&out, rest);
    return out;
  }
  const json::value& o = answer.observation;
  if (spec.observation_format() == v1::OBSERVATION_FORMAT_JSON) return json::serialize(o);
  if (o.is_string()) return std::string(o.as_string());
  if (o.is_object()) {
    for (const char* field : {"prompt", "text", "message", "content"}) {
      if (const json::value* v = o.as_object().if_contains(field); v != nullptr && v->is_string()) {
        return std::string(v->as_string());
      }
    }
  }
  return json::serialize(o);
}

absl::StatusOr<json::value> ActionOf(const v1::EnvServerSpec& spec, const ChatReply& reply) {
  json::value arguments = json::object();
  if (!reply.tool_calls.empty()) {
    auto parsed = ParseArguments(reply.tool_calls.front().arguments);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the arguments of your call of ", reply.tool_calls.front().name, " are not a JSON object"));
    }
    arguments = *std::move(parsed);
  }
  if (!spec.action_template().empty()) {
    json::value action = json::parse(spec.action_template());  // checked at submission
    if (absl::StrContains(spec.action_template(), "\"{{arguments}}\"") && reply.tool_calls.empty()) {
      return absl::InvalidArgumentError("no action: call one of the tools offered");
    }
    Fill(action, reply, arguments);
    return action;
  }
  switch (spec.action_format()) {
    case v1::ACTION_FORMAT_TOOL_CALL:
      if (reply.tool_calls.empty()) return absl::InvalidArgumentError("no action: call one of the tools offered");
      return arguments;
    case v1::ACTION_FORMAT_JSON: {
      absl::string_view text = absl::StripAsciiWhitespace(reply.content);
      if (absl::ConsumePrefix(&text, "```")) {
        absl::ConsumePrefix(&text, "json");
        absl::ConsumeSuffix(&text, "```");
      }
      boost::system::error_code ec;
      json::value action = json::parse(json::string_view(text.data(), text.size()), ec);
      if (ec || !action.is_object()) {
        return absl::InvalidArgumentError("no action: answer with the action as one JSON object");
      }
      return action;
    }
    default: {
      json::object action;
      action[spec.action_field().empty() ? "message" : spec.action_field()] = reply.content;
      return json::value(std::move(action));
    }
  }
}

double EnvReward(const v1::EnvServerSpec& spec, const std::vector<double>& step_rewards) {
  if (step_rewards.empty()) return 0;
  if (spec.reward_mode() == v1::ENV_REWARD_MODE_LAST) return step_rewards.back();
  double sum = 0;
  for (double r : step_rewards) sum += r;
  return sum;
}

}  // namespace corral::scheduler
