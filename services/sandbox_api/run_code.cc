#include "services/sandbox_api/run_code.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "boost/json.hpp"

namespace corral::sandbox_api {
namespace {

namespace json = boost::json;

json::string_view JsonView(absl::string_view s) { return {s.data(), s.size()}; }
absl::string_view A(const json::string& s) { return {s.data(), s.size()}; }

constexpr std::array<absl::string_view, 29> kLanguages = {
    "python", "cpp",   "nodejs",        "go",   "go_test", "java",       "php",  "csharp", "bash",  "typescript",
    "sql",    "rust",  "cuda",          "lua",  "R",       "perl",       "D_ut", "ruby",   "scala", "julia",
    "pytest", "junit", "kotlin_script", "jest", "verilog", "python_gpu", "lean", "swift",  "racket"};

const std::vector<Toolchain>& Toolchains() {
  static const auto* table = new std::vector<Toolchain>{
      {"python", "main.py", {}, {"python3", "main.py"}, {"python3"}, "Debian's python3"},
      {"pytest",
       "test_main.py",
       {},
       {"python3", "-m", "pytest", "-q", "test_main.py"},
       {"python3"},
       "Debian's python3-pytest"},
      {"bash", "main.sh", {}, {"bash", "main.sh"}, {"bash"}, "Debian's bash"},
      {"cpp", "main.cpp", {"g++", "-std=c++17", "-O2", "-o", "main", "main.cpp"}, {"./main"}, {"g++"}, "Debian's g++"},
      {"nodejs", "main.js", {}, {"node", "main.js"}, {"node"}, "Debian's nodejs"},
      {"go", "main.go", {"go", "build", "-o", "main", "main.go"}, {"./main"}, {"go"}, "Debian's golang-go"},
      {"java", "Main.java", {"javac", "Main.java"}, {"java", "Main"}, {"javac", "java"}, "Debian's default-jdk"},
      {"rust", "main.rs", {"rustc", "-O", "-o", "main", "main.rs"}, {"./main"}, {"rustc"}, "Debian's rustc"},
      {"lua", "main.lua", {}, {"lua", "main.lua"}, {"lua"}, "Debian's lua5.4"},
      {"perl", "main.pl", {}, {"perl", "main.pl"}, {"perl"}, "Debian's perl"},
      {"ruby", "main.rb", {}, {"ruby", "main.rb"}, {"ruby"}, "Debian's ruby"},
      {"php", "main.php", {}, {"php", "main.php"}, {"php"}, "Debian's php-cli"},
      {"R", "main.R", {}, {"Rscript", "main.R"}, {"Rscript"}, "Debian's r-base-core"},
      {"julia", "main.jl", {}, {"julia", "main.jl"}, {"julia"}, "julia (not in Debian bookworm: an image)"},
  };
  return *table;
}

// One error of FastAPI's 422 detail list (pydantic v2's wording).
json::object Detail(absl::string_view type, json::array loc, absl::string_view msg, json::value input,
                    json::object ctx = {}) {
  json::object d{
      {"type", JsonView(type)}, {"loc", std::move(loc)}, {"msg", JsonView(msg)}, {"input", std::move(input)}};
  if (!ctx.empty()) d["ctx"] = std::move(ctx);
  return d;
}

RunCodeRefusal Refuse(json::object detail) {
  return {422, json::serialize(json::object{{"detail", json::array{std::move(detail)}}})};
}

json::array Loc(absl::string_view field) { return json::array{"body", JsonView(field)}; }

// A long input is echoed cut (pydantic echoes it whole; 100 MiB of code need not come back).
json::value Echo(const json::value& v) {
  if (v.is_string() && v.as_string().size() > 256) {
    return json::string(absl::StrCat(A(v.as_string()).substr(0, 256), "…"));
  }
  return v;
}

// A path of `files` or `fetch_files`: relative to the code's working directory, without "..".
bool RelativePath(absl::string_view p) {
  if (p.empty() || p.front() == '/' || p.find('\0') != absl::string_view::npos) return false;
  for (absl::string_view part : absl::StrSplit(p, '/')) {
    if (part == "..") return false;
  }
  return true;
}

std::optional<RunCodeRefusal> Number(const json::object& o, absl::string_view field, double max, double& out) {
  const json::value* v = o.if_contains(JsonView(field));
  if (v == nullptr) return std::nullopt;
  if (!v->is_number() || v->is_bool()) {
    return Refuse(Detail("float_type", Loc(field), "Input should be a valid number", Echo(*v)));
  }
  out = v->to_number<double>();
  if (!std::isfinite(out) || out < 0) {
    return Refuse(
        Detail("greater_than_equal", Loc(field), "Input should be greater than or equal to 0", *v, {{"ge", 0}}));
  }
  if (out > max) {
    return Refuse(Detail("less_than_equal", Loc(field), absl::StrCat("Input should be less than or equal to ", max), *v,
                         {{"le", max}}));
  }
  return std::nullopt;
}

json::value ResultJson(const std::optional<CommandResult>& r) {
  if (!r) return nullptr;
  using S = CommandResult::Status;
  json::object o;
  o["status"] = r->status == S::kFinished ? "Finished" : r->status == S::kError ? "Error" : "TimeLimitExceeded";
  o["execution_time"] = r->status == S::kError ? json::value(nullptr) : json::value(r->execution_time);
  o["return_code"] = r->return_code ? json::value(*r->return_code) : json::value(nullptr);
  o["stdout"] = r->status == S::kError ? json::value(nullptr) : json::value(r->stdout_text);
  o["stderr"] = r->stderr_text;
  return o;
}

std::string Answer(absl::string_view status, const std::string& message, const std::optional<CommandResult>& compile,
                   const std::optional<CommandResult>& run,
                   const std::vector<std::pair<std::string, std::string>>& fetched, const std::string& executor) {
  json::object files;
  for (const auto& [path, content] : fetched) files[path] = absl::Base64Escape(content);
  return json::serialize(
      json::object{{"status", JsonView(status)},
                   {"message", message},
                   {"compile_result", ResultJson(compile)},
                   {"run_result", ResultJson(run)},
                   {"executor_pod_name", executor.empty() ? json::value(nullptr) : json::value(executor)},
                   {"files", std::move(files)}});
}

}  // namespace

std::span<const absl::string_view> SandboxFusionLanguages() { return kLanguages; }

const Toolchain* ToolchainFor(absl::string_view language) {
  for (const Toolchain& t : Toolchains()) {
    if (t.language == language) return &t;
  }
  return nullptr;
}

std::string UnavailableMessage(absl::string_view language, const Toolchain* toolchain) {
  if (toolchain == nullptr) {
    return absl::StrCat("language '", language, "' has no toolchain in Corral; it runs ",
                        absl::StrJoin(Toolchains(), ", ",
                                      [](std::string* out, const Toolchain& t) { absl::StrAppend(out, t.language); }));
  }
  return absl::StrCat("language '", language, "' needs ", absl::StrJoin(toolchain->programs, " and "),
                      ", not found in the sandbox: install ", toolchain->provided_by,
                      " on the sandbox hosts, or run it in an image that has it");
}

std::variant<RunCodeRequest, RunCodeRefusal> ParseRunCode(absl::string_view body, const RunCodeLimits& limits) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(body.data(), body.size()), ec);
  if (ec) {
    return Refuse(
        Detail("json_invalid", json::array{"body", 0}, "JSON decode error", json::object{}, {{"error", ec.message()}}));
  }
  if (!v.is_object()) {
    return Refuse(Detail("model_attributes_type", json::array{"body"},
                         "Input should be a valid dictionary or object to extract fields from", Echo(v)));
  }
  const json::object& o = v.as_object();
  RunCodeRequest r;
  for (absl::string_view field : {"code", "language"}) {
    const json::value* f = o.if_contains(JsonView(field));
    if (f == nullptr) return Refuse(Detail("missing", Loc(field), "Field required", json::object{}));
    if (!f->is_string()) return Refuse(Detail("string_type", Loc(field), "Input should be a valid string", Echo(*f)));
  }
  r.code = std::string(o.at("code").as_string());
  if (r.code.size() > limits.max_code_bytes) {
    return Refuse(Detail("string_too_long", Loc("code"),
                         absl::StrCat("String should have at most ", limits.max_code_bytes, " characters"),
                         Echo(o.at("code")), {{"max_length", limits.max_code_bytes}}));
  }
  r.language = std::string(o.at("language").as_string());
  if (std::find(kLanguages.begin(), kLanguages.end(), r.language) == kLanguages.end()) {
    std::string expected;
    for (size_t i = 0; i < kLanguages.size(); ++i) {
      absl::StrAppend(&expected, i == 0 ? "" : i + 1 == kLanguages.size() ? " or " : ", ", "'", kLanguages[i], "'");
    }
    return Refuse(Detail("literal_error", Loc("language"), absl::StrCat("Input should be ", expected),
                         Echo(o.at("language")), {{"expected", expected}}));
  }
  if (auto bad = Number(o, "compile_timeout", limits.max_timeout_seconds, r.compile_timeout)) return *bad;
  if (auto bad = Number(o, "run_timeout", limits.max_timeout_seconds, r.run_timeout)) return *bad;
  if (const json::value* m = o.if_contains("memory_limit_MB"); m != nullptr) {
    if (!m->is_int64() && !m->is_uint64()) {
      return Refuse(Detail("int_type", Loc("memory_limit_MB"), "Input should be a valid integer", Echo(*m)));
    }
    r.memory_limit_mb = m->to_number<int64_t>();
    if (r.memory_limit_mb < -1) {
      return Refuse(Detail("greater_than_equal", Loc("memory_limit_MB"),
                           "Input should be greater than or equal to -1 (-1: no limit)", *m, {{"ge", -1}}));
    }
  }
  if (const json::value* s = o.if_contains("stdin"); s != nullptr && !s->is_null()) {
    if (!s->is_string()) return Refuse(Detail("string_type", Loc("stdin"), "Input should be a valid string", Echo(*s)));
    r.stdin_text = std::string(s->as_string());
  }
  size_t total = 0;
  if (const json::value* f = o.if_contains("files"); f != nullptr && !f->is_null()) {
    if (!f->is_object()) {
      return Refuse(Detail("dict_type", Loc("files"), "Input should be a valid dictionary", Echo(*f)));
    }
    for (const auto& [key, content] : f->as_object()) {
      const absl::string_view path(key.data(), key.size());
      if (content.is_null() || absl::StrContains(path, "IGNORE_THIS_FILE")) continue;  // as SandboxFusion skips
      json::array loc{"body", "files", key};
      if (!RelativePath(path)) {
        return Refuse(Detail("value_error", loc, "Value error, a path relative to the code's directory, without '..'",
                             json::string(key)));
      }
      std::string decoded;
      if (!content.is_string() || !absl::Base64Unescape(A(content.as_string()), &decoded)) {
        return Refuse(Detail("value_error", loc, "Value error, the content must be base64", Echo(content)));
      }
      total += decoded.size();
      if (total > limits.max_files_bytes) {
        return Refuse(Detail("value_error", loc,
                             absl::StrCat("Value error, the files exceed ", limits.max_files_bytes, " bytes"),
                             json::string(key)));
      }
      r.files.emplace_back(std::string(path), std::move(decoded));
    }
  }
  if (const json::value* f = o.if_contains("fetch_files"); f != nullptr && !f->is_null()) {
    if (!f->is_array())
      return Refuse(Detail("list_type", Loc("fetch_files"), "Input should be a valid list", Echo(*f)));
    for (size_t i = 0; i < f->as_array().size(); ++i) {
      const json::value& p = f->as_array()[i];
      if (!p.is_string() || !RelativePath(A(p.as_string()))) {
        return Refuse(Detail("value_error", json::array{"body", "fetch_files", i},
                             "Value error, a path relative to the code's directory, without '..'", Echo(p)));
      }
      r.fetch_files.emplace_back(p.as_string());
    }
  }
  return r;
}

std::string RunCodeAnswer(const std::optional<CommandResult>& compile, const std::optional<CommandResult>& run,
                          const std::vector<std::pair<std::string, std::string>>& fetched,
                          const std::string& executor) {
  using S = CommandResult::Status;
  for (const auto* r : {&compile, &run}) {
    if (*r && (*r)->status == S::kError)
      return Answer("SandboxError", (*r)->stderr_text, compile, run, fetched, executor);
  }
  bool failed = false;
  for (const auto* r : {&compile, &run}) {
    failed = failed || (*r && ((*r)->status == S::kTimeLimitExceeded || (*r)->return_code.value_or(0) != 0));
  }
  return Answer(failed ? "Failed" : "Success", "", compile, run, fetched, executor);
}

std::string SandboxErrorAnswer(const std::string& message, const std::string& executor) {
  return Answer("SandboxError", message, std::nullopt, std::nullopt, {}, executor);
}

}  // namespace corral::sandbox_api
