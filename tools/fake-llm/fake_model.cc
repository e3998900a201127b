#include "tools/fake-llm/fake_model.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "boost/json.hpp"

namespace corral::fakellm {

namespace json = boost::json;

std::optional<ArithmeticPlan> PlanArithmetic(const std::string& last_user, const std::string& tool_property,
                                             const std::string* tool_output, int64_t seed) {
  // The first "A op B" in the text.
  size_t i = 0;
  int64_t a = 0, b = 0;
  char op = 0;
  bool found = false;
  for (; i < last_user.size() && !found; ++i) {
    if (!isdigit(static_cast<unsigned char>(last_user[i]))) continue;
    size_t j = i;
    a = 0;
    while (j < last_user.size() && isdigit(static_cast<unsigned char>(last_user[j])))
      a = a * 10 + (last_user[j++] - '0');
    while (j < last_user.size() && last_user[j] == ' ') ++j;
    if (j >= last_user.size() || std::string("+-*/").find(last_user[j]) == std::string::npos) {
      i = j;
      continue;
    }
    op = last_user[j++];
    while (j < last_user.size() && last_user[j] == ' ') ++j;
    if (j >= last_user.size() || !isdigit(static_cast<unsigned char>(last_user[j]))) continue;
    b = 0;
    while (j < last_user.size() && isdigit(static_cast<unsigned char>(last_user[j])))
      b = b * 10 + (last_user[j++] - '0');
    found = !(op == '/' && b == 0);
  }
  if (!found) return std::nullopt;
  const std::string expr = absl::StrCat(a, " ", std::string(1, op), " ", b);
  const bool wrong = ((static_cast<uint64_t>(seed) * 2654435761u) >> 7) % 4 == 0;
  ArithmeticPlan plan;
  if (tool_output != nullptr) {
    int64_t value = 0;
    std::string digits;
    for (char c : *tool_output) {
      if (isdigit(static_cast<unsigned char>(c)) || (c == '-' && digits.empty()))
        digits += c;
      else if (!digits.empty())
        break;
    }
    if (!absl::SimpleAtoi(digits, &value)) return ArithmeticPlan{false, "", "I could not compute it."};
    plan.reply = absl::StrCat("The answer is ", wrong ? value + 1 : value, ".");
    return plan;
  }
  if (tool_property == "code" || tool_property == "command") {
    plan.tool_call = true;
    json::object args;
    const std::string py_op = op == '/' ? "//" : std::string(1, op);
    args[tool_property] = tool_property == "code" ? absl::StrCat("print(", a, " ", py_op, " ", b, ")")
                                                  : absl::StrCat("echo $((", expr, "))");
    plan.arguments = json::serialize(args);
    return plan;
  }
  int64_t value = op == '+' ? a + b : op == '-' ? a - b : op == '*' ? a * b : a / b;
  plan.reply = absl::StrCat("Let me compute ", expr, ". #### ", wrong ? value + 1 : value);
  return plan;
}

std::vector<std::string> SplitTokens(const std::string& text) {
  // Words with their leading space, like a BPE vocabulary would: "a b" -> "a", " b".
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if ((c == ' ' || c == '\n') && !cur.empty()) {
      out.push_back(cur);
      cur.clear();
    }
    cur += c;
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

int32_t TokenId(const std::string& token) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (unsigned char c : token) h = (h ^ c) * 16777619u;
  return static_cast<int32_t>(1000 + h % 100000);
}

}  // namespace corral::fakellm
