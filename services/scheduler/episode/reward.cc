#include "services/scheduler/episode/reward.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "boost/json.hpp"
#include "re2/re2.h"

namespace corral::scheduler {
namespace {

namespace json = boost::json;

std::string Details(const char* function, const std::string& extracted, const std::string& answer, bool matched) {
  json::object o;
  o["function"] = function;
  o["extracted"] = extracted;
  o["answer"] = answer;
  o["match"] = matched;
  return json::serialize(o);
}

std::optional<double> Number(std::string text) {
  text = std::string(absl::StripAsciiWhitespace(absl::StrReplaceAll(text, {{",", ""}, {"$", ""}})));
  double x;
  if (!absl::SimpleAtod(text, &x) || !std::isfinite(x)) return std::nullopt;
  return x;
}

bool Close(double x, double answer, double tolerance) {
  if (tolerance <= 0) tolerance = 1e-6;
  return std::fabs(x - answer) <= tolerance * std::max(1.0, std::fabs(answer));
}

RewardOutcome Numeric(const char* name, const std::optional<double>& got, const std::string& extracted,
                      const std::string& answer, double tolerance) {
  const std::optional<double> want = Number(answer);
  const bool ok = got && want && Close(*got, *want, tolerance);
  return {ok ? 1.0 : 0.0, {}, Details(name, extracted, answer, ok)};
}

}  // namespace

std::optional<double> LastNumber(const std::string& text) {
  static const RE2 kNumber(R"((-?[0-9][0-9,]*(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|-?\.[0-9]+))");
  re2::StringPiece input(text);
  std::string match, last;
  while (RE2::FindAndConsume(&input, kNumber, &match)) last = match;
  if (last.empty()) return std::nullopt;
  return Number(last);
}

RewardOutcome ComputeReward(const v1::RewardSpec& spec, const std::string& answer, const std::string& final_message) {
  const std::string want(absl::StripAsciiWhitespace(answer));
  switch (spec.function()) {
    case v1::REWARD_FUNCTION_NUMERIC: {
      const auto got = LastNumber(final_message);
      return Numeric("numeric", got, got ? absl::StrCat(*got) : "", want, spec.tolerance());
    }
    case v1::REWARD_FUNCTION_GSM8K: {
      const size_t mark = final_message.rfind("####");
      const std::string tail = mark == std::string::npos ? "" : final_message.substr(mark + 4);
      // The number right after the marker: the first one in the tail.
      static const RE2 kFirst(R"(\s*\$?(-?[0-9][0-9,]*(?:\.[0-9]+)?))");
      std::string first;
      std::optional<double> got;
      if (RE2::PartialMatch(tail, kFirst, &first)) got = Number(first);
      return Numeric("gsm8k", got, first, want, spec.tolerance());
    }
    case v1::REWARD_FUNCTION_REGEX: {
      RE2 re(spec.pattern(), RE2::Quiet);
      std::string extracted;
      bool found = false;
      if (re.ok()) {
        if (re.NumberOfCapturingGroups() > 0) {
          found = RE2::PartialMatch(final_message, re, &extracted);
        } else {
          re2::StringPiece input(final_message), whole;
          found = re.Match(input, 0, input.size(), RE2::UNANCHORED, &whole, 1);
          if (found) extracted = std::string(whole);
        }
      }
      const bool ok = found && std::string(absl::StripAsciiWhitespace(extracted)) == want;
      return {ok ? 1.0 : 0.0, {}, Details("regex", extracted, want, ok)};
    }
    default: {
      const std::string got(absl::StripAsciiWhitespace(final_message));
      const bool ok = got == want;
      return {ok ? 1.0 : 0.0, {}, Details("exact", got.substr(0, 256), want, ok)};
    }
  }
}

absl::StatusOr<RewardOutcome> VerifierReward(const std::optional<std::string>& reward_txt,
                                             const std::optional<std::string>& reward_json,
                                             std::optional<int> exit_code) {
  if (reward_txt) {
    auto x = Number(*reward_txt);
    if (!x) {
      return absl::InvalidArgumentError(
          absl::StrCat("/logs/verifier/reward.txt holds no number: '", reward_txt->substr(0, 64), "'"));
    }
    return RewardOutcome{*x, {}, "", "reward.txt"};
  }
  if (reward_json) {
    boost::system::error_code ec;
    json::value v = json::parse(*reward_json, ec);
    const json::object* o = !ec && v.is_object() ? &v.as_object() : nullptr;
    const json::value* r = o ? o->if_contains("reward") : nullptr;
    if (r == nullptr || !r->is_number()) {
      return absl::InvalidArgumentError("/logs/verifier/reward.json is not {\"reward\": <number>, ...}");
    }
    RewardOutcome out{r->to_number<double>(), {}, *reward_json, "reward.json"};
    if (const json::value* steps = o->if_contains("step_rewards"); steps != nullptr && steps->is_array()) {
      for (const auto& s : steps->as_array()) {
        if (!s.is_number()) return absl::InvalidArgumentError("reward.json: step_rewards must be numbers");
        out.step_rewards.push_back(s.to_number<double>());
      }
    }
    return out;
  }
  if (exit_code) return RewardOutcome{*exit_code == 0 ? 1.0 : 0.0, {}, "", "exit_code"};
  return absl::NotFoundError("the verifier left no reward (no reward.txt, reward.json or exit code)");
}

absl::StatusOr<RewardOutcome> StdoutReward(const std::string& stdout_tail, std::optional<int> exit_code) {
  absl::string_view last;
  for (absl::string_view line : absl::StrSplit(stdout_tail, '\n')) {
    if (!absl::StripAsciiWhitespace(line).empty()) last = absl::StripAsciiWhitespace(line);
  }
  if (!last.empty()) {
    if (auto x = Number(std::string(last))) return RewardOutcome{*x, {}, "", "stdout"};
    if (last.front() == '{') {
      auto from_json = VerifierReward(std::nullopt, std::string(last), std::nullopt);
      if (!from_json.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the verifier's last line of stdout is not {\"reward\": <number>, ...}: '", last.substr(0, 64), "'"));
      }
      from_json->source = "stdout";
      return from_json;
    }
  }
  if (exit_code) return RewardOutcome{*exit_code == 0 ? 1.0 : 0.0, {}, "", "exit_code"};
  return absl::NotFoundError("the verifier printed no reward and has no exit code");
}

}  // namespace corral::scheduler
