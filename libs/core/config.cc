#include "libs/core/config.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "libs/core/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace corral {
namespace {

std::string FlagName(absl::string_view key) { return absl::StrReplaceAll(key, {{".", "-"}, {"_", "-"}}); }

std::string NodeKind(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Scalar: return absl::StrCat("'", node.Scalar(), "'");
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    default: return "an undefined value";
  }
}

std::string Quote(absl::string_view s) { return absl::StrCat("\"", s, "\""); }

}  // namespace

ConfigSchema::ConfigSchema(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

ConfigSchema::Entry& ConfigSchema::Add(std::string key, Type type, std::string type_name, void* out, std::string help) {
  by_key_[key] = entries_.size();
  Entry& e = entries_.emplace_back();
  e.key = std::move(key);
  e.type = type;
  e.type_name = std::move(type_name);
  e.out = out;
  e.help = std::move(help);
  return e;
}

void ConfigSchema::String(std::string key, std::string* out, std::string help) {
  Add(std::move(key), Type::kString, "STRING", out, std::move(help)).default_text = Quote(*out);
}

void ConfigSchema::Bool(std::string key, bool* out, std::string help) {
  Add(std::move(key), Type::kBool, "BOOL", out, std::move(help)).default_text = *out ? "true" : "false";
}

void ConfigSchema::Int(std::string key, int64_t* out, std::string help, int64_t min, int64_t max) {
  Entry& e = Add(std::move(key), Type::kInt, absl::StrCat("INT [", min, "..", max, "]"), out, std::move(help));
  e.default_text = absl::StrCat(*out);
  e.int_min = min;
  e.int_max = max;
}

void ConfigSchema::Double(std::string key, double* out, std::string help, double min, double max) {
  Entry& e = Add(std::move(key), Type::kDouble, absl::StrCat("NUMBER [", min, "..", max, "]"), out, std::move(help));
  e.default_text = absl::StrCat(*out);
  e.double_min = min;
  e.double_max = max;
}

void ConfigSchema::Duration(std::string key, absl::Duration* out, std::string help, absl::Duration min,
                            absl::Duration max) {
  Entry& e = Add(std::move(key), Type::kDuration,
                 absl::StrCat("DURATION [", absl::FormatDuration(min), "..", absl::FormatDuration(max), "]"), out,
                 std::move(help));
  e.default_text = absl::FormatDuration(*out);
  e.duration_min = min;
  e.duration_max = max;
}

void ConfigSchema::StringList(std::string key, std::vector<std::string>* out, std::string help) {
  std::vector<std::string> quoted;
  for (const auto& s : *out) quoted.push_back(Quote(s));
  Add(std::move(key), Type::kStringList, "LIST", out, std::move(help)).default_text =
      absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
}

void ConfigSchema::Custom(std::string key, std::string type_name, std::string default_text, std::string help,
                          std::function<absl::Status(const YAML::Node&)> parse) {
  Entry& e = Add(std::move(key), Type::kCustom, std::move(type_name), nullptr, std::move(help));
  e.default_text = std::move(default_text);
  e.parse = std::move(parse);
}

std::string ConfigSchema::Help() const {
  std::string out = absl::StrCat("Usage: ", program_, " [--config FILE] [--KEY VALUE]...\n\n", summary_,
                                 "\n\nEvery key can be set in the YAML file given by --config and overridden by a "
                                 "flag\n(dots and underscores become dashes).\n\n");
  absl::StrAppend(&out, "  --config FILE\n      YAML file with any of the keys below\n");
  absl::StrAppend(&out, "  --help\n      print this help and exit\n");
  for (const Entry& e : entries_) {
    absl::StrAppend(&out, "  --", FlagName(e.key), " ", e.type_name, "   (key ", e.key, ", default ", e.default_text,
                    ")\n      ", e.help, "\n");
  }
  return out;
}

absl::Status ConfigSchema::ApplyScalar(Entry& e, absl::string_view text) {
  switch (e.type) {
    case Type::kString: *static_cast<std::string*>(e.out) = std::string(text); return absl::OkStatus();
    case Type::kBool: {
      std::string t = absl::AsciiStrToLower(text);
      if (t == "true" || t == "yes" || t == "on" || t == "1") {
        *static_cast<bool*>(e.out) = true;
      } else if (t == "false" || t == "no" || t == "off" || t == "0") {
        *static_cast<bool*>(e.out) = false;
      } else {
        return absl::InvalidArgumentError(absl::StrCat("expected true or false, got '", text, "'"));
      }
      return absl::OkStatus();
    }
    case Type::kInt: {
      int64_t v = 0;
      if (!absl::SimpleAtoi(text, &v)) {
        return absl::InvalidArgumentError(absl::StrCat("expected an integer, got '", text, "'"));
      }
      if (v < e.int_min || v > e.int_max) {
        return absl::InvalidArgumentError(absl::StrCat(v, " is out of range; allowed: ", e.int_min, " to ", e.int_max));
      }
      *static_cast<int64_t*>(e.out) = v;
      return absl::OkStatus();
    }
    case Type::kDouble: {
      double v = 0;
      if (!absl::SimpleAtod(text, &v) || !std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrCat("expected a number, got '", text, "'"));
      }
      if (v < e.double_min || v > e.double_max) {
        return absl::InvalidArgumentError(
            absl::StrCat(v, " is out of range; allowed: ", e.double_min, " to ", e.double_max));
      }
      *static_cast<double*>(e.out) = v;
      return absl::OkStatus();
    }
    case Type::kDuration: {
      absl::Duration d;
      if (!absl::ParseDuration(text, &d)) {
        return absl::InvalidArgumentError(
            absl::StrCat("expected a duration such as 250ms, 30s or 5m, got '", text, "'"));
      }
      if (d < e.duration_min || d > e.duration_max) {
        return absl::InvalidArgumentError(
            absl::StrCat(text, " is out of range; allowed: ", absl::FormatDuration(e.duration_min), " to ",
                         absl::FormatDuration(e.duration_max)));
      }
      *static_cast<absl::Duration*>(e.out) = d;
      return absl::OkStatus();
    }
    case Type::kStringList: {
      auto* list = static_cast<std::vector<std::string>*>(e.out);
      if (!e.list_overridden) list->clear();
      e.list_overridden = true;
      list->emplace_back(text);
      return absl::OkStatus();
    }
    case Type::kCustom: break;
  }
  return absl::InternalError("unreachable config type");
}

absl::Status ConfigSchema::ApplyNode(Entry& e, const YAML::Node& node) {
  if (e.type == Type::kCustom) return e.parse(node);
  if (e.type == Type::kStringList) {
    if (!node.IsSequence()) return absl::InvalidArgumentError(absl::StrCat("expected a list, got ", NodeKind(node)));
    std::vector<std::string> items;
    for (const YAML::Node& item : node) {
      if (!item.IsScalar()) {
        return absl::InvalidArgumentError(absl::StrCat("expected a list of strings, found ", NodeKind(item)));
      }
      items.push_back(item.Scalar());
    }
    *static_cast<std::vector<std::string>*>(e.out) = std::move(items);
    return absl::OkStatus();
  }
  if (!node.IsScalar()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", absl::AsciiStrToLower(e.type_name), ", got ", NodeKind(node)));
  }
  return ApplyScalar(e, node.Scalar());
}

absl::Status ConfigSchema::ApplyMapping(const YAML::Node& map, const std::string& prefix, absl::string_view source) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key_node = it->first;
    const YAML::Node value = it->second;
    const int line = key_node.Mark().line + 1;
    if (!key_node.IsScalar()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", line, ": keys must be plain names"));
    }
    std::string key = prefix + key_node.Scalar();
    if (auto found = by_key_.find(key); found != by_key_.end()) {
      absl::Status s = ApplyNode(entries_[found->second], value);
      if (!s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(source, ":", line, ": key '", key, "': ", s.message()));
      }
      continue;
    }
    auto child = by_key_.lower_bound(key + ".");
    bool is_section = child != by_key_.end() && absl::StartsWith(child->first, key + ".");
    if (is_section && value.IsMap()) {
      CORRAL_RETURN_IF_ERROR(ApplyMapping(value, key + ".", source));
      continue;
    }
    if (is_section) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line, ": key '", key, "' is a section; expected a mapping, got ", NodeKind(value)));
    }
    std::vector<std::string> known;
    for (const Entry& e : entries_) known.push_back(e.key);
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", line, ": unknown key '", key, "'; known keys: ", absl::StrJoin(known, ", ")));
  }
  return absl::OkStatus();
}

absl::Status ConfigSchema::ApplyYaml(const YAML::Node& root, absl::string_view source) {
  if (root.IsNull()) return absl::OkStatus();  // an empty file sets nothing
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ":", root.Mark().line + 1,
                                                   ": the top level must be a mapping of keys, got ", NodeKind(root)));
  }
  try {
    return ApplyMapping(root, "", source);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ":", e.mark.line + 1, ": ", e.msg));
  }
}

const ConfigSchema::Entry* ConfigSchema::FindFlag(absl::string_view name) const {
  for (const Entry& e : entries_) {
    if (FlagName(e.key) == name) return &e;
  }
  return nullptr;
}

bool ConfigSchema::IsBoolFlag(absl::string_view name) const {
  const Entry* e = FindFlag(name);
  return e != nullptr && e->type == Type::kBool;
}

absl::Status ConfigSchema::ApplyFlag(absl::string_view name, absl::string_view value) {
  Entry* e = const_cast<Entry*>(FindFlag(name));
  if (e == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown flag --", name, "; run ", program_, " --help to list the keys"));
  }
  absl::Status s;
  if (e->type == Type::kCustom) {
    try {
      s = e->parse(YAML::Load(std::string(value)));
    } catch (const YAML::Exception& ex) {
      s = absl::InvalidArgumentError(absl::StrCat("not valid YAML: ", ex.msg));
    }
  } else {
    s = ApplyScalar(*e, value);
  }
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("flag --", name, ": ", s.message()));
  return absl::OkStatus();
}

absl::Status LoadConfigFile(ConfigSchema& schema, const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return absl::NotFoundError(absl::StrCat("cannot read config file '", path, "'"));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", e.mark.line + 1, ": invalid YAML: ", e.msg));
  }
  return schema.ApplyYaml(root, path);
}

absl::StatusOr<CommandLine> LoadConfig(ConfigSchema& schema, int argc, const char* const* argv, bool allow_positional) {
  CommandLine cmd;
  struct Flag {
    std::string name, value;
  };
  std::vector<Flag> flags;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      cmd.help = true;
      return cmd;
    }
    if (arg == "--") {
      for (++i; i < argc; ++i) cmd.positional.emplace_back(argv[i]);
      break;
    }
    if (!absl::StartsWith(arg, "--") || arg.size() == 2) {
      cmd.positional.emplace_back(arg);
      continue;
    }
    absl::string_view body = arg.substr(2);
    Flag flag;
    if (size_t eq = body.find('='); eq != absl::string_view::npos) {
      flag = {std::string(body.substr(0, eq)), std::string(body.substr(eq + 1))};
    } else if (schema.IsBoolFlag(body)) {
      flag = {std::string(body), "true"};
    } else if (i + 1 < argc) {
      flag = {std::string(body), argv[++i]};
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag --", body, " needs a value"));
    }
    if (flag.name == "config") {
      cmd.config_file = flag.value;
    } else {
      flags.push_back(std::move(flag));
    }
  }
  if (!cmd.positional.empty() && !allow_positional) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", cmd.positional.front(), "'; run ", schema.program(), " --help"));
  }
  if (!cmd.config_file.empty()) CORRAL_RETURN_IF_ERROR(LoadConfigFile(schema, cmd.config_file));
  for (const Flag& f : flags) CORRAL_RETURN_IF_ERROR(schema.ApplyFlag(f.name, f.value));
  return cmd;
}

}  // namespace corral
