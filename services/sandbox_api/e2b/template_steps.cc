#include "services/sandbox_api/e2b/template_steps.h"

#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "boost/json.hpp"
#include "libs/api/ids.h"
#include "services/sandbox_api/e2b/e2b_wire.h"

namespace corral::sandbox_api {
namespace {

namespace json = boost::json;

constexpr char kDefaultPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
constexpr int kMaxSteps = 200;

absl::Status BadStep(int n, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("step ", n, ": ", why));
}

// `args` of a step as strings.
absl::StatusOr<std::vector<std::string>> Args(const json::object& step, int n) {
  std::vector<std::string> out;
  const json::value* args = step.if_contains("args");
  if (args == nullptr || args->is_null()) return out;
  if (!args->is_array()) return BadStep(n, "args must be an array of strings");
  for (const json::value& a : args->as_array()) {
    if (!a.is_string()) return BadStep(n, "args must be an array of strings");
    out.emplace_back(a.as_string());
  }
  return out;
}

std::string StringField(const json::object& o, const char* name) {
  const json::value* v = o.if_contains(name);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

// $NAME and ${NAME} replaced by what `env` holds (PATH: the usual default when unset; others: empty).
std::string Expand(const std::string& value, const std::map<std::string, std::string>& env) {
  std::string out;
  for (size_t i = 0; i < value.size();) {
    if (value[i] != '$' || i + 1 == value.size()) {
      out += value[i++];
      continue;
    }
    const bool braced = value[i + 1] == '{';
    size_t start = i + (braced ? 2 : 1), end = start;
    while (end < value.size() && (absl::ascii_isalnum(static_cast<unsigned char>(value[end])) || value[end] == '_')) {
      ++end;
    }
    if (end == start || (braced && (end == value.size() || value[end] != '}'))) {
      out += value[i++];
      continue;
    }
    const std::string name = value.substr(start, end - start);
    auto it = env.find(name);
    out += it != env.end() ? it->second : name == "PATH" ? kDefaultPath : "";
    i = end + (braced ? 1 : 0);
  }
  return out;
}

// E2B's "user" is the sandbox's default user (envd's rule).
std::string UserOf(const std::string& name) { return name == "user" ? std::string() : name; }

// A path as the steps mean it: absolute, or under the WORKDIR in force.
std::string Under(const std::string& workdir, const std::string& path) {
  if (absl::StartsWith(path, "/")) return path;
  const std::string base = workdir.empty() ? "." : workdir;
  return absl::StrCat(base, absl::EndsWith(base, "/") ? "" : "/", path);
}

// sh -c `script`, in bash where the image has it (E2B's steps are written for bash).
v1::Command Shell(const std::string& script, const std::string& user, const std::map<std::string, std::string>& env) {
  v1::Command c;
  c.add_argv("/bin/sh");
  c.add_argv("-c");
  c.add_argv("if command -v bash >/dev/null 2>&1; then exec bash -c \"$1\"; else exec sh -c \"$1\"; fi");
  c.add_argv("sh");
  c.add_argv(script);
  c.set_user(user);
  c.mutable_env()->insert(env.begin(), env.end());
  return c;
}

class Planner {
 public:
  Planner(const v1::TemplateBuild* base, const std::map<std::string, std::string>& files) : files_(files) {
    if (base == nullptr) return;
    plan_.environment = base->environment();
    plan_.environment.clear_limits();
    env_ = TemplateEnv(*base);
    auto get = [&](const char* key) {
      auto it = base->annotations().find(key);
      return it == base->annotations().end() ? std::string() : it->second;
    };
    user_ = get(kUserAnnotation);
    workdir_ = get(kWorkdirAnnotation);
    plan_.annotations[kStartCmdAnnotation] = get(kStartCmdAnnotation);
    plan_.annotations[kReadyCmdAnnotation] = get(kReadyCmdAnnotation);
    for (int i = 0; i < plan_.environment.setup_commands_size(); ++i) steps_.push_back(0);  // the base's
  }

  absl::StatusOr<TemplatePlan> Plan(const json::object& body) {
    plain_ = plan_.environment.image().empty();
    const json::value* steps = body.if_contains("steps");
    if (steps != nullptr && !steps->is_null() && !steps->is_array()) {
      return absl::InvalidArgumentError("steps must be an array");
    }
    const size_t count = steps == nullptr || steps->is_null() ? 0 : steps->as_array().size();
    if (count > kMaxSteps) return absl::InvalidArgumentError(absl::StrCat("at most ", kMaxSteps, " steps"));
    const bool force = body.if_contains("force") != nullptr && body.at("force").is_bool() && body.at("force").as_bool();
    for (size_t i = 0; i < count; ++i) {
      const json::value& step = steps->as_array()[i];
      if (!step.is_object()) return BadStep(static_cast<int>(i + 1), "must be an object");
      const int n = static_cast<int>(i + 1);
      const json::object& s = step.as_object();
      if (force || (s.if_contains("force") != nullptr && s.at("force").is_bool() && s.at("force").as_bool())) {
        force_ = true;
      }
      auto args = Args(s, n);
      if (!args.ok()) return args.status();
      const std::string type = StringField(s, "type");
      plan_.log_lines.push_back(
          absl::StrCat("[", n, "/", count, "] ", type, " ", absl::StrJoin(Shown(type, *args), " ")));
      absl::Status done = type == "RUN"       ? Run(n, *args)
                          : type == "COPY"    ? Copy(n, *args, StringField(s, "filesHash"))
                          : type == "ENV"     ? Env(n, *args)
                          : type == "WORKDIR" ? Workdir(n, *args)
                          : type == "USER"    ? User(n, *args)
                                              : BadStep(n, absl::StrCat("unknown step type '", type, "'"));
      if (!done.ok()) return done;
    }
    if (force_) {  // a build that must not come from a cache: its content (so its key) is new
      v1::Command* nonce = plan_.environment.mutable_setup_commands()->Add();
      nonce->add_argv("true");
      nonce->add_argv(absl::StrCat("rebuild-", StringField(body, "buildID")));
      steps_.push_back(0);
    }
    if (copies_ > 0) Add(Shell(absl::StrCat("rm -rf ", Stage()), plain_ ? "" : "root", env_), 0);
    json::object env;
    for (const auto& [k, v] : env_) env[k] = JsonText(v);
    if (!env_.empty()) plan_.annotations[kEnvAnnotation] = json::serialize(env);
    if (body.if_contains("startCmd") != nullptr) plan_.annotations[kStartCmdAnnotation] = StringField(body, "startCmd");
    if (body.if_contains("readyCmd") != nullptr) plan_.annotations[kReadyCmdAnnotation] = StringField(body, "readyCmd");
    plan_.annotations[kUserAnnotation] = user_;
    plan_.annotations[kWorkdirAnnotation] = workdir_;
    plan_.annotations[kStepsAnnotation] = absl::StrJoin(steps_, ",");
    for (auto it = plan_.annotations.begin(); it != plan_.annotations.end();) {
      it = it->second.empty() ? plan_.annotations.erase(it) : std::next(it);
    }
    return std::move(plan_);
  }

 private:
  // What the log shows of a step: the args, less a COPY's empty ones.
  static std::vector<std::string> Shown(const std::string& type, std::vector<std::string> args) {
    if (type == "COPY" && args.size() > 2) args.resize(2);
    if (type == "RUN" && args.size() > 1) args[1] = absl::StrCat("(as ", args[1], ")");
    return args;
  }

  void Add(v1::Command command, int step) {
    *plan_.environment.add_setup_commands() = std::move(command);
    steps_.push_back(step);
  }

  // Where COPY archives wait to be unpacked: in the image's root, or the home on the host's filesystem.
  std::string Stage() const { return plain_ ? ".corral-copy" : "/.corral-copy"; }

  absl::Status CheckUser(int n, const std::string& user) const {
    if (plain_ && !user.empty()) {
      return BadStep(n, absl::StrCat("user '", user,
                                     "': a template on the host's filesystem has one user; build from an image "
                                     "(fromImage) for root and other users"));
    }
    return absl::OkStatus();
  }

  absl::Status Run(int n, const std::vector<std::string>& args) {
    if (args.empty() || args[0].empty()) return BadStep(n, "RUN needs a command");
    const std::string user = args.size() > 1 && !args[1].empty() ? UserOf(args[1]) : user_;
    if (absl::Status s = CheckUser(n, user); !s.ok()) return s;
    const std::string script = workdir_.empty() ? args[0] : absl::StrCat("cd ", ShellQuote(workdir_), " && ", args[0]);
    Add(Shell(script, user, env_), n);
    return absl::OkStatus();
  }

  absl::Status Env(int n, const std::vector<std::string>& args) {
    if (args.size() % 2 != 0) return BadStep(n, "ENV needs name and value pairs");
    for (size_t i = 0; i < args.size(); i += 2) {
      if (!IsValidEnvName(args[i])) return BadStep(n, absl::StrCat("'", args[i], "' is not a variable name"));
      env_[args[i]] = Expand(args[i + 1], env_);
    }
    return absl::OkStatus();
  }

  absl::Status Workdir(int n, const std::vector<std::string>& args) {
    if (args.size() != 1 || args[0].empty()) return BadStep(n, "WORKDIR needs one path");
    workdir_ = Under(workdir_, args[0]);
    Add(Shell(absl::StrCat("mkdir -p ", ShellQuote(workdir_)), plain_ ? "" : "root", env_), n);
    return absl::OkStatus();
  }

  absl::Status User(int n, const std::vector<std::string>& args) {
    if (args.size() != 1 || args[0].empty()) return BadStep(n, "USER needs one user");
    if (absl::Status s = CheckUser(n, UserOf(args[0])); !s.ok()) return s;
    user_ = UserOf(args[0]);
    return absl::OkStatus();
  }

  absl::Status Copy(int n, const std::vector<std::string>& args, const std::string& hash) {
    if (args.size() < 2 || args[0].empty() || args[1].empty())
      return BadStep(n, "COPY needs a source and a destination");
    auto file = files_.find(hash);
    if (file == files_.end()) return BadStep(n, absl::StrCat("the files of COPY ", args[0], " were not uploaded"));
    const std::string& src = args[0];
    const std::string owner = args.size() > 2 && !args[2].empty() ? UserOf(args[2]) : user_;
    const std::string mode = args.size() > 3 ? args[3] : "";
    if (absl::Status s = CheckUser(n, owner); !s.ok()) return s;
    if (!mode.empty() && (mode.size() > 5 || !absl::c_all_of(mode, [](char c) { return c >= '0' && c <= '7'; }))) {
      return BadStep(n, absl::StrCat("mode '", mode, "' is not an octal mode"));
    }
    if (absl::StartsWith(src, "/") || absl::StrContains(src, "..")) {
      return BadStep(n, absl::StrCat("source '", src, "' must be a relative path inside the build context"));
    }
    const int index = copies_++;
    v1::InlineFile* archive = plan_.environment.add_setup_files();
    archive->set_path(absl::StrCat(Stage(), "/", index, ".tar"));
    archive->set_content(file->second);
    const bool gzip = file->second.size() >= 2 && file->second[0] == '\x1f' && file->second[1] == '\x8b';
    const std::string dir = absl::StrCat(Stage(), "/", index);
    const std::string dest = Under(workdir_, args[1]);
    const std::string from = absl::StrCat(dir, "/", src);
    std::vector<std::string> script = {
        "set -e",
        absl::StrCat("mkdir -p ", dir),
        absl::StrCat("tar -x", gzip ? "z" : "", "of ", dir, ".tar -C ", dir),
    };
    if (!plain_ && !owner.empty() && owner != "root")
      script.push_back(absl::StrCat("chown -R ", ShellQuote(owner + ":"), " ", dir));
    if (!mode.empty()) script.push_back(absl::StrCat("chmod -R ", mode, " ", dir, "/*"));
    if (src.find_first_of("*?[") != std::string::npos) {  // a glob
      script.push_back(absl::StrCat("mkdir -p ", ShellQuote(dest)));
      script.push_back(absl::StrCat("cp -a ", dir, "/", src, " ", ShellQuote(dest), "/"));
    } else {
      const std::string q = ShellQuote(from);
      const std::string into_dir =
          absl::EndsWith(dest, "/")
              ? absl::StrCat("mkdir -p ", ShellQuote(dest), " && cp -a ", q, " ", ShellQuote(dest))
              : absl::StrCat("mkdir -p \"$(dirname ", ShellQuote(dest), ")\" && cp -a ", q, " ", ShellQuote(dest));
      const std::string dest_dir = dest == "/" ? dest : std::string(absl::StripSuffix(dest, "/"));
      script.push_back(absl::StrCat("if [ -d ", q, " ]; then mkdir -p ", ShellQuote(dest_dir), " && cp -a ", q, "/. ",
                                    ShellQuote(dest_dir), "; else ", into_dir, "; fi"));
    }
    script.push_back(absl::StrCat("rm -rf ", dir, " ", dir, ".tar"));
    Add(Shell(absl::StrJoin(script, "\n"), plain_ ? "" : "root", env_), n);
    return absl::OkStatus();
  }

  const std::map<std::string, std::string>& files_;
  TemplatePlan plan_;
  std::map<std::string, std::string> env_;
  std::string user_, workdir_;
  std::vector<int> steps_;
  int copies_ = 0;
  bool plain_ = true;
  bool force_ = false;
};

}  // namespace

std::string ShellQuote(const std::string& s) {
  if (s.empty()) return "''";
  const bool safe = absl::c_all_of(s, [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
           absl::string_view("_@%+=:,./-").find(c) != absl::string_view::npos;
  });
  if (safe) return s;
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\"'\"'"}}), "'");
}

std::map<std::string, std::string> TemplateEnv(const v1::TemplateBuild& build) {
  std::map<std::string, std::string> out;
  auto it = build.annotations().find(kEnvAnnotation);
  if (it == build.annotations().end()) return out;
  boost::system::error_code ec;
  json::value v = json::parse(it->second, ec);
  if (ec || !v.is_object()) return out;
  for (const auto& [k, value] : v.as_object()) {
    if (value.is_string()) out[std::string(k)] = std::string(value.as_string());
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> CopyHashes(const json::object& body) {
  std::vector<std::string> out;
  const json::value* steps = body.if_contains("steps");
  if (steps == nullptr || steps->is_null()) return out;
  if (!steps->is_array()) return absl::InvalidArgumentError("steps must be an array");
  for (const json::value& step : steps->as_array()) {
    if (!step.is_object() || StringField(step.as_object(), "type") != "COPY") continue;
    const std::string hash = StringField(step.as_object(), "filesHash");
    if (hash.empty() || hash.size() > 128 ||
        !absl::c_all_of(hash, [](char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)); })) {
      return absl::InvalidArgumentError("a COPY step's filesHash must be 1-128 letters and digits");
    }
    out.push_back(hash);
  }
  return out;
}

absl::StatusOr<TemplatePlan> PlanTemplate(const json::object& body, const v1::TemplateBuild* base,
                                          const std::map<std::string, std::string>& files) {
  return Planner(base, files).Plan(body);
}

std::pair<std::string, std::string> DescribeFailure(const v1::TemplateBuild& build) {
  const std::string& error = build.error();
  const size_t at = error.find("setup_commands[");
  int index = -1;
  size_t close = std::string::npos;
  if (at != std::string::npos) {
    close = error.find(']', at);
    if (close == std::string::npos || !absl::SimpleAtoi(error.substr(at + 15, close - at - 15), &index)) index = -1;
  }
  auto steps = build.annotations().find(kStepsAnnotation);
  std::vector<std::string> numbers;
  if (steps != build.annotations().end()) numbers = absl::StrSplit(steps->second, ',');
  if (index < 0 || static_cast<size_t>(index) >= numbers.size()) return {error, ""};
  const std::string& step = numbers[index];
  // What follows the host's "(argv)": " exited with code N; output ends: ...".
  const size_t exited = error.find(") exited", close);
  const std::string rest = exited == std::string::npos ? absl::StrCat(": ", error) : error.substr(exited + 1);
  if (step == "0") return {absl::StrCat("the base", rest), "base"};
  return {absl::StrCat("step ", step, rest), step};
}

}  // namespace corral::sandbox_api
