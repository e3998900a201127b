#include "tools/corral/dataset.h"

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/json.hpp"
#include "google/protobuf/util/json_util.h"
#include "libs/core/status_macros.h"

namespace corral::cli {
namespace {

namespace json = boost::json;

// Keys whose values are enums, and the prefix of their enum names.
const char* EnumPrefix(json::string_view key) {
  if (key == "runner") return "RUNNER_";
  if (key == "function") return "REWARD_FUNCTION_";
  if (key == "kind") return "TOOL_KIND_";
  if (key == "network_policy" || key == "setup_network_policy") return "NETWORK_POLICY_";
  if (key == "observation_format") return "OBSERVATION_FORMAT_";
  if (key == "action_format") return "ACTION_FORMAT_";
  if (key == "reward_mode") return "ENV_REWARD_MODE_";
  return nullptr;
}

// Rewrites the dataset conveniences into proto JSON, in place. A file's "content_file" is read relative to
// `base_dir` (the dataset's directory).
absl::Status Normalize(json::value& v, const std::string& base_dir) {
  if (v.is_array()) {
    for (auto& item : v.as_array()) CORRAL_RETURN_IF_ERROR(Normalize(item, base_dir));
    return absl::OkStatus();
  }
  if (!v.is_object()) return absl::OkStatus();
  json::object& o = v.as_object();
  for (auto& [key, value] : o) {
    if (const char* prefix = EnumPrefix(key); prefix != nullptr && value.is_string()) {
      std::string name(value.as_string());
      if (!absl::StartsWith(name, prefix)) value = json::string(absl::StrCat(prefix, absl::AsciiStrToUpper(name)));
      continue;
    }
    // A "*_json" field (params_json, reset_json, tools_json, ...) may hold the JSON itself.
    if (absl::EndsWith(absl::string_view(key.data(), key.size()), "_json") && !value.is_string()) {
      value = json::string(json::serialize(value));
      continue;
    }
    if ((key == "files" || key == "setup_files") && value.is_array()) {
      for (auto& f : value.as_array()) {
        if (!f.is_object()) continue;
        json::object& file = f.as_object();
        if (auto* text = file.if_contains("content"); text != nullptr && text->is_string()) {
          *text = json::string(absl::Base64Escape(std::string(text->as_string())));
        }
        if (auto* b64 = file.if_contains("content_base64"); b64 != nullptr) {
          file["content"] = *b64;
          file.erase("content_base64");
        }
        if (auto* from = file.if_contains("content_file"); from != nullptr && from->is_string()) {
          std::string path(from->as_string());
          if (!path.empty() && path[0] != '/' && !base_dir.empty()) path = absl::StrCat(base_dir, "/", path);
          std::ifstream in(path, std::ios::binary);
          if (!in) return absl::NotFoundError(absl::StrCat("content_file: cannot read ", path));
          std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
          file["content"] = json::string(absl::Base64Escape(data));
          file.erase("content_file");
        }
      }
    }
    CORRAL_RETURN_IF_ERROR(Normalize(value, base_dir));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::Task> TaskFromJsonLine(const std::string& line, int line_number, const std::string& base_dir) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ": ", what));
  };
  boost::system::error_code ec;
  json::value v = json::parse(line, ec);
  if (ec || !v.is_object()) return bad("not a JSON object");
  json::object& o = v.as_object();
  static const char* const kTaskKeys[] = {
      "id",    "prompt",   "messages",    "answer",   "runner",        "llm",        "reward",      "tool_loop",
      "agent", "verifier", "environment", "timeouts", "metadata_json", "env_server", "mcp_servers", "branch"};
  json::object task, metadata;
  for (auto& [key, value] : o) {
    bool known = false;
    for (const char* k : kTaskKeys) known = known || key == k;
    if (known) {
      task[key] = value;
    } else {
      metadata[key] = value;
    }
  }
  if (auto* answer = task.if_contains("answer"); answer != nullptr && !answer->is_string()) {
    *answer = json::string(json::serialize(*answer));
  }
  if (auto* id = task.if_contains("id"); id != nullptr && id->is_number()) *id = json::string(json::serialize(*id));
  if (!metadata.empty() && !task.contains("metadata_json")) task["metadata_json"] = json::serialize(metadata);
  json::value normalized = std::move(task);
  if (absl::Status s = Normalize(normalized, base_dir); !s.ok()) return bad(s.message());
  v1::Task out;
  auto status = google::protobuf::util::JsonStringToMessage(json::serialize(normalized), &out);
  if (!status.ok()) return bad(status.message().as_string());
  return out;
}

absl::StatusOr<std::vector<v1::Task>> LoadJsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::vector<v1::Task> tasks;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    const size_t slash = path.rfind('/');
    auto task = TaskFromJsonLine(line, n, slash == std::string::npos ? "." : path.substr(0, slash));
    if (!task.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", task.status().message()));
    tasks.push_back(*std::move(task));
  }
  return tasks;
}

}  // namespace corral::cli
