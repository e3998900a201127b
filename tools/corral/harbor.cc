#include "tools/corral/harbor.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "libs/harness/harnesses.h"
#include "toml++/toml.h"
#include "tools/corral/dataset.h"

namespace corral::cli {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

absl::StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", path.string()));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every regular file below `root` (sorted), placed at `prefix`/<relative path>.
absl::Status AddTree(const fs::path& root, const std::string& prefix,
                     google::protobuf::RepeatedPtrField<v1::InlineFile>* out) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    auto content = ReadFile(file);
    if (!content.ok()) return content.status();
    v1::InlineFile* f = out->Add();
    const std::string rel = fs::relative(file, root).string();
    f->set_path(prefix.empty() ? rel : (fs::path(prefix) / rel).string());
    f->set_content(*std::move(content));
    f->set_permissions(static_cast<uint32_t>(fs::status(file).permissions() & fs::perms::mask));
  }
  return absl::OkStatus();
}

std::string WorkdirOf(const v1::EnvironmentSpec& env) { return env.workdir().empty() ? "/workspace" : env.workdir(); }

void AddTaskPath(v1::EnvironmentSpec* env, const std::string& path) {
  if (env->task_paths().empty()) {
    env->add_task_paths("/workspace");
    env->add_task_paths("/logs");
  }
  if (std::find(env->task_paths().begin(), env->task_paths().end(), path) == env->task_paths().end()) {
    env->add_task_paths(path);
  }
}

// `use_image`: FROM is the environment's image (each FROM starts over: the last stage is what runs);
// `prebuilt`: the image is task.toml's docker_image, which already holds what RUN, COPY and ADD would add.
absl::Status ReadDockerfile(const fs::path& env_dir, v1::EnvironmentSpec* env, json::object& metadata, bool use_image,
                            bool prebuilt) {
  auto text = ReadFile(env_dir / "Dockerfile");
  if (!text.ok()) return text.status();
  const std::string joined = absl::StrReplaceAll(*text, {{"\\\n", " "}});
  std::set<std::string> stages;  // names given with FROM ... AS
  for (absl::string_view raw : absl::StrSplit(joined, '\n')) {
    const std::string line(absl::StripAsciiWhitespace(raw));
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.find(' ');
    const std::string op = absl::AsciiStrToUpper(line.substr(0, space));
    const std::string rest(space == std::string::npos ? "" : absl::StripAsciiWhitespace(line.substr(space + 1)));
    if (op == "FROM") {
      // The image is the first word that is not a flag (--platform=...); "AS name" names the stage.
      std::vector<std::string> words;
      for (std::string& w : ShellWords(rest)) {
        if (!absl::StartsWith(w, "--")) words.push_back(std::move(w));
      }
      const std::string image = words.empty() ? "" : words[0];
      metadata["image"] = image;
      if (use_image && !prebuilt) {
        if (stages.contains(image)) {
          return absl::InvalidArgumentError(absl::StrCat((env_dir / "Dockerfile").string(), ": FROM ", image,
                                                         " builds on an earlier stage, which is not supported"));
        }
        if (words.size() == 3 && absl::AsciiStrToUpper(words[1]) == "AS") stages.insert(words[2]);
        // A stage starts over: nothing of the one before carries into it.
        env->set_image(image);
        env->clear_setup_commands();
        env->clear_setup_files();
        env->clear_env();
        env->clear_workdir();
        env->clear_task_paths();
      }
    } else if (prebuilt && (op == "RUN" || op == "COPY" || op == "ADD")) {
      continue;
    } else if (op == "RUN") {
      v1::Command* c = env->add_setup_commands();
      c->add_argv("bash");
      c->add_argv("-c");
      c->add_argv(rest);
      c->set_cwd(env->workdir());
    } else if (op == "WORKDIR") {
      env->set_workdir(rest);
      if (absl::StartsWith(rest, "/")) AddTaskPath(env, rest);
    } else if (op == "ENV") {
      const std::vector<std::string> words = ShellWords(rest);
      if (!words.empty() && words[0].find('=') != std::string::npos) {
        for (const std::string& w : words) {
          const size_t eq = w.find('=');
          (*env->mutable_env())[w.substr(0, eq)] = eq == std::string::npos ? "" : w.substr(eq + 1);
        }
      } else if (!words.empty()) {
        const size_t sp = rest.find(' ');
        (*env->mutable_env())[words[0]] =
            sp == std::string::npos ? "" : std::string(absl::StripAsciiWhitespace(rest.substr(sp + 1)));
      }
    } else if (op == "COPY" || op == "ADD") {
      std::vector<std::string> args;
      for (std::string& w : ShellWords(rest)) {
        if (use_image && absl::StartsWith(w, "--from=")) {
          return absl::InvalidArgumentError(absl::StrCat((env_dir / "Dockerfile").string(), ": '", line,
                                                         "' copies from another build stage, which needs a build"));
        }
        if (!absl::StartsWith(w, "--")) args.push_back(std::move(w));
      }
      if (args.size() < 2) continue;
      const std::string dest = args.back();
      for (size_t i = 0; i + 1 < args.size(); ++i) {
        const fs::path src = env_dir / args[i];
        if (fs::is_directory(src)) {
          if (absl::Status s = AddTree(src, dest, env->mutable_setup_files()); !s.ok()) return s;
        } else if (fs::is_regular_file(src)) {
          auto content = ReadFile(src);
          if (!content.ok()) return content.status();
          v1::InlineFile* f = env->add_setup_files();
          f->set_path(absl::EndsWith(dest, "/") ? (fs::path(dest) / src.filename()).string() : dest);
          f->set_content(*std::move(content));
          f->set_permissions(static_cast<uint32_t>(fs::status(src).permissions() & fs::perms::mask));
        }
      }
    }
  }
  return absl::OkStatus();
}

// `key`'s positive number of seconds, or nullopt (absent, not a number, not positive: the default applies).
std::optional<absl::Duration> Seconds(const std::map<std::string, std::string>& toml, const std::string& key) {
  double seconds = 0;
  if (auto it = toml.find(key); it != toml.end() && absl::SimpleAtod(it->second, &seconds) && seconds > 0) {
    return absl::Seconds(seconds);
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::string> ShellWords(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else if (quote == '"' && c == '\\' && i + 1 < line.size()) {
        word += line[++i];
      } else {
        word += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

namespace {

void Flatten(const toml::table& table, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>& out) {
  for (auto&& [key, node] : table) {
    const std::string name =
        prefix.empty() ? std::string(key.str()) : absl::StrCat(prefix, ".", std::string(key.str()));
    if (const toml::table* sub = node.as_table()) {
      Flatten(*sub, name, out);
      continue;
    }
    std::ostringstream json_text;
    json_text << toml::json_formatter(node);
    // Compact, as every other JSON text of a task is.
    out.emplace_back(name, json::serialize(json::parse(json_text.str())));
  }
}

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseToml(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  try {
    const toml::table root = toml::parse(text);
    Flatten(root, "", out);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", static_cast<uint64_t>(e.source().begin.line), ": ", std::string(e.description())));
  }
  return out;
}

absl::StatusOr<v1::Task> LoadHarborTask(const std::string& dir, const std::string& agent, bool use_image) {
  const fs::path root = fs::absolute(dir);
  if (!fs::exists(root / "instruction.md")) {
    return absl::InvalidArgumentError(absl::StrCat(root.string(), ": no instruction.md (not a Harbor task directory)"));
  }
  v1::Task task;
  task.set_id(root.filename().string());
  task.set_runner(v1::RUNNER_AGENT);
  auto instruction = ReadFile(root / "instruction.md");
  if (!instruction.ok()) return instruction.status();
  task.set_prompt(*std::move(instruction));
  SetAgent(agent, task.mutable_agent());

  std::map<std::string, std::string> toml;
  json::object metadata;
  if (fs::exists(root / "task.toml")) {
    auto text = ReadFile(root / "task.toml");
    if (!text.ok()) return text.status();
    auto parsed = ParseToml(*text);
    if (!parsed.ok())
      return absl::InvalidArgumentError(absl::StrCat((root / "task.toml").string(), ": ", parsed.status().message()));
    for (auto& [key, value] : *parsed) {
      if (absl::StartsWith(key, "metadata.")) {
        // Nested again, as the table it was ([metadata.author] name = … → {"author": {"name": …}}).
        std::vector<std::string> path = absl::StrSplit(key.substr(9), '.');
        json::object* at = &metadata;
        for (size_t i = 0; i + 1 < path.size(); ++i) {
          json::value& next = (*at)[path[i]];
          if (!next.is_object()) next = json::object();
          at = &next.as_object();
        }
        (*at)[path.back()] = json::parse(value);
      }
      toml[key] = value;
    }
  }
  v1::EnvironmentSpec* env = task.mutable_environment();
  const fs::path env_dir = root / "environment";
  const bool dockerfile = fs::exists(env_dir / "Dockerfile");
  std::string prebuilt;
  if (auto it = toml.find("environment.docker_image"); it != toml.end() && use_image) {
    const json::value v = json::parse(it->second);
    if (!v.is_string() || v.as_string().empty()) {
      return absl::InvalidArgumentError(absl::StrCat((root / "task.toml").string(), ": docker_image must be a name"));
    }
    prebuilt = v.as_string();
    env->set_image(prebuilt);
  }
  if (dockerfile) {
    if (absl::Status s = ReadDockerfile(env_dir, env, metadata, use_image, !prebuilt.empty()); !s.ok()) return s;
  }
  // Where the agent and the verifier run (a relative upload would land in the sandbox home instead).
  const std::string workdir = WorkdirOf(*env);
  if (!dockerfile && fs::is_directory(env_dir)) {
    if (absl::Status s = AddTree(env_dir, workdir, env->mutable_files()); !s.ok()) return s;
  }
  double memory_mb = 0;
  if (auto it = toml.find("environment.memory_mb"); it != toml.end() && absl::SimpleAtod(it->second, &memory_mb)) {
    env->mutable_limits()->set_memory_bytes(static_cast<uint64_t>(memory_mb * 1024 * 1024));
  }
  if (auto it = toml.find("environment.docker_image"); it != toml.end() && (!metadata.contains("image") || use_image)) {
    metadata["image"] = json::parse(it->second);
  }
  if (fs::is_directory(root / "tests")) {
    if (absl::Status s = AddTree(root / "tests", workdir + "/tests", task.mutable_verifier()->mutable_files());
        !s.ok()) {
      return s;
    }
    // tests/ is the verifier's: whatever the agent left there is removed before the task's own files go in.
    task.mutable_verifier()->add_replace_paths(workdir + "/tests");
  }
  if (auto d = Seconds(toml, "agent.timeout_sec")) ToProto(*d, task.mutable_timeouts()->mutable_agent());
  if (auto d = Seconds(toml, "verifier.timeout_sec")) ToProto(*d, task.mutable_timeouts()->mutable_verifier());
  if (auto d = Seconds(toml, "environment.build_timeout_sec")) ToProto(*d, task.mutable_timeouts()->mutable_setup());
  if (!metadata.empty()) task.set_metadata_json(json::serialize(metadata));
  return task;
}

void SetAgent(const std::string& agent, v1::AgentSpec* spec) {
  // A known harness, even with a malformed version: Submit then says what a version may hold.
  if (auto harness = ResolveHarness(agent); harness.ok() || absl::IsInvalidArgument(harness.status())) {
    spec->set_harness(agent);
    return;
  }
  v1::Command* cmd = spec->mutable_command();
  cmd->add_argv("bash");
  cmd->add_argv("-c");
  cmd->add_argv(agent);
}

absl::StatusOr<std::vector<v1::Task>> LoadTaskInput(const std::string& path, const std::string& agent,
                                                    const std::vector<std::string>& agent_files, bool use_image) {
  if (!fs::is_directory(path)) {
    if (!agent_files.empty()) return absl::InvalidArgumentError("--agent-file goes with Harbor task directories");
    if (use_image) return absl::InvalidArgumentError("--harbor-images goes with Harbor task directories");
    auto tasks = LoadJsonl(path);
    // --agent: the agent of every agent task that names none.
    if (!tasks.ok() || agent.empty()) return tasks;
    for (v1::Task& t : *tasks) {
      if (t.runner() == v1::RUNNER_AGENT && t.agent().harness().empty() && t.agent().command().argv().empty()) {
        SetAgent(agent, t.mutable_agent());
      }
    }
    return tasks;
  }
  if (agent.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path,
                                                   " is a directory of Harbor tasks: name the agent that runs in "
                                                   "each sandbox with --agent 'COMMAND' or a harness's name (",
                                                   HarnessNames(), ")"));
  }
  std::vector<v1::InlineFile> uploads;
  for (const auto& file : agent_files) {
    auto content = ReadFile(file);
    if (!content.ok()) return content.status();
    v1::InlineFile& f = uploads.emplace_back();
    f.set_path(fs::path(file).filename().string());
    f.set_content(*std::move(content));
    f.set_permissions(0755);
  }
  absl::StatusOr<std::vector<v1::Task>> tasks;
  if (fs::exists(fs::path(path) / "instruction.md")) {
    auto task = LoadHarborTask(path, agent, use_image);
    if (!task.ok()) return task.status();
    tasks = std::vector<v1::Task>{*std::move(task)};
  } else {
    tasks = LoadHarborTasks(path, agent, use_image);
  }
  if (!tasks.ok()) return tasks;
  for (v1::Task& t : *tasks) {
    for (v1::InlineFile f : uploads) {
      f.set_path(absl::StrCat(WorkdirOf(t.environment()), "/", kAgentDir, "/", f.path()));
      *t.mutable_environment()->add_files() = std::move(f);
    }
  }
  return tasks;
}

absl::StatusOr<std::vector<v1::Task>> LoadHarborTasks(const std::string& root, const std::string& agent,
                                                      bool use_image) {
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory() && fs::exists(entry.path() / "instruction.md")) dirs.push_back(entry.path());
  }
  std::sort(dirs.begin(), dirs.end());
  if (dirs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(root, ": no Harbor task directories (with an instruction.md) in it"));
  }
  std::vector<v1::Task> tasks;
  for (const fs::path& d : dirs) {
    auto task = LoadHarborTask(d.string(), agent, use_image);
    if (!task.ok()) return task.status();
    tasks.push_back(*std::move(task));
  }
  return tasks;
}

}  // namespace corral::cli
