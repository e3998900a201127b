// Config loading shared by every binary: a service registers each key of its Config struct once (type,
// help, bounds; the struct's initial value is the default), then LoadConfig fills it from a YAML file and
// from flags that override single keys. `--help` lists every key with its default.
//
// Keys may be nested with dots ("tls.cert_file" is `tls: {cert_file: …}` in YAML and `--tls-cert-file` as a
// flag). Errors name the key, and the file and line (or the flag) it came from; on any error the caller
// must not run.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace YAML {
class Node;
}

namespace corral {

// Not thread-safe; used once at startup. Output pointers must outlive the schema.
class ConfigSchema {
 public:
  ConfigSchema(std::string program, std::string summary);

  void String(std::string key, std::string* out, std::string help);
  void Bool(std::string key, bool* out, std::string help);
  void Int(std::string key, int64_t* out, std::string help, int64_t min, int64_t max);
  void Double(std::string key, double* out, std::string help, double min, double max);
  // Written as "250ms", "30s", "5m", "1h30m".
  void Duration(std::string key, absl::Duration* out, std::string help, absl::Duration min, absl::Duration max);
  // A YAML sequence of strings; as a flag, each occurrence appends one item (the first one replaces the
  // file's list).
  void StringList(std::string key, std::vector<std::string>* out, std::string help);
  // A value with a shape of its own (e.g. a list of limit declarations). `parse` receives the YAML node
  // (as a flag, the flag's text parsed as inline YAML) and returns INVALID_ARGUMENT to reject it; the
  // loader prefixes the location.
  void Custom(std::string key, std::string type_name, std::string default_text, std::string help,
              std::function<absl::Status(const YAML::Node&)> parse);

  // Usage text: every key with its flag, type, default and help.
  std::string Help() const;
  const std::string& program() const { return program_; }

  // Applies a parsed YAML document; `source` names it in errors (usually the file path).
  absl::Status ApplyYaml(const YAML::Node& root, absl::string_view source);
  // Applies one flag; `name` is without the leading dashes, `value` is its text.
  absl::Status ApplyFlag(absl::string_view name, absl::string_view value);
  // True if `name` is a boolean flag, which may be given without a value.
  bool IsBoolFlag(absl::string_view name) const;

 private:
  enum class Type { kString, kBool, kInt, kDouble, kDuration, kStringList, kCustom };
  struct Entry {
    std::string key;
    Type type;
    std::string type_name;
    std::string help;
    std::string default_text;
    void* out;
    int64_t int_min = 0, int_max = 0;
    double double_min = 0, double_max = 0;
    absl::Duration duration_min, duration_max;
    std::function<absl::Status(const YAML::Node&)> parse;
    bool list_overridden = false;
  };

  Entry& Add(std::string key, Type type, std::string type_name, void* out, std::string help);
  absl::Status ApplyNode(Entry& entry, const YAML::Node& node);
  absl::Status ApplyScalar(Entry& entry, absl::string_view text);
  absl::Status ApplyMapping(const YAML::Node& map, const std::string& prefix, absl::string_view source);
  const Entry* FindFlag(absl::string_view name) const;

  std::string program_;
  std::string summary_;
  std::vector<Entry> entries_;  // in registration order, for --help
  std::map<std::string, size_t, std::less<>> by_key_;
};

// What the command line asked for beyond config keys.
struct CommandLine {
  bool help = false;
  std::string config_file;              // from --config, empty if none
  std::vector<std::string> positional;  // arguments that are not flags
};

// Parses argv: `--config FILE` is loaded first (wherever it appears), then every `--key=value` /
// `--key value` flag in order. `--help`/`-h` stops parsing and sets `help`. Positional arguments are
// rejected unless `allow_positional`.
absl::StatusOr<CommandLine> LoadConfig(ConfigSchema& schema, int argc, const char* const* argv,
                                       bool allow_positional = false);

// Loads a YAML file into the schema (used by LoadConfig; exposed for tests and tools).
absl::Status LoadConfigFile(ConfigSchema& schema, const std::string& path);

}  // namespace corral
