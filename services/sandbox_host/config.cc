#include "services/sandbox_host/config.h"

#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "libs/core/status_macros.h"

namespace corral::sandbox {

void RegisterConfig(ConfigSchema& schema, Config* config) {
  config->server.grpc_listen = "127.0.0.1:7500";
  config->server.metrics_listen = "127.0.0.1:9500";
  RegisterServerFlags(schema, &config->server);
  schema.String("root", &config->host.root, "directory for sandbox homes (not under /tmp); created if missing");
  schema.Int("capacity", &config->host.capacity, "most sandboxes alive at once", 1, 100000);
  schema.Int("max_create_count", &config->host.max_create_count, "most sandboxes one CreateSandboxes may ask for", 1,
             100000);
  schema.Int("uid_first", &config->uid_first, "first uid of the sandbox uid pool", 1000, 4000000000);
  schema.Int("uid_last", &config->uid_last, "last uid of the sandbox uid pool", 1000, 4000000000);
  schema.String("default_network", &config->default_network,
                "network policy when a spec names none: open, proxy_only or none");
  schema.Int("min_landlock_abi", &config->min_landlock_abi,
             "refuse to start below this Landlock ABI (unless allow_unconfined)", 0, 64);
  schema.Bool("allow_unconfined", &config->allow_unconfined,
              "start even without the Landlock ABI required (sandboxes then rely on uids, rlimits and cgroups)");
  schema.Duration("exit_when_empty_for", &config->exit_when_empty_for,
                  "exit (cleanly, code 0) after holding no sandbox for this long; 0 = never. For hosts started per job",
                  absl::ZeroDuration(), absl::Hours(24 * 7));
  schema.Duration("default_exec_timeout", &config->host.default_exec_timeout,
                  "timeout of an Exec whose command sets none", absl::Seconds(1), absl::Hours(24));
  schema.Duration("max_exec_timeout", &config->host.max_exec_timeout, "longest timeout a command may ask for",
                  absl::Seconds(1), absl::Hours(24 * 7));
  schema.Duration("default_setup_timeout", &config->host.default_setup_timeout,
                  "limit on a whole template build when PrepareTemplate sets none", absl::Seconds(1), absl::Hours(24));
  schema.Int("max_templates", &config->host.templates.max_templates, "most templates kept at once", 1, 100000);
  schema.Int("max_template_bytes", &config->max_template_bytes, "disk the kept templates may use, in bytes", 0,
             int64_t{1} << 50);
  schema.Int("max_image_bytes", &config->max_image_bytes,
             "disk the image store's unpacked layers may use, in bytes; past it the least recently used images no "
             "sandbox uses are removed (0 = no limit)",
             0, int64_t{1} << 50);
  schema.Int("default_disk_bytes", &config->host.default_disk_bytes,
             "what a sandbox in an image may write (its root's upper layer, /tmp, /dev/shm: each a tmpfs this size, "
             "counted in its memory too) when its limits set no disk_bytes",
             1 << 20, int64_t{1} << 46);
  schema.Int("max_disk_bytes", &config->host.max_disk_bytes, "largest disk_bytes a sandbox may ask for", 1 << 20,
             int64_t{1} << 46);
  schema.Bool("usage_readings", &config->host.usage_readings,
              "read every sandbox's cgroup each second for its usage (memory over time, metrics over time; "
              "default on)");
  schema.String("host_id", &config->host_id, "this host's name in HostInfo (default: the machine's hostname)");
  schema.String("harness_root", &config->harness_root,
                "where `corral harness install` puts agent harnesses: HostInfo lists the ones installed there, "
                "the scheduler places a task naming a harness only on hosts that have it, and sandboxes get it as "
                "CORRAL_HARNESS_ROOT");
  schema.String("registry_ca_file", &config->registry_ca_file,
                "PEM certificates trusted for image registries besides the system's (a private registry's CA)");
  schema.String("registry_auth_file", &config->registry_auth_file,
                "registry credentials, in the auth file format of docker/podman login ({\"auths\": {...}})");
  schema.StringList("insecure_registries", &config->insecure_registries,
                    "registries (host or host:port) pulled from over plain HTTP");
  schema.Duration("registry_timeout", &config->registry_timeout,
                  "limit on connecting to a registry and on each read or write of a pull", absl::Seconds(1),
                  absl::Hours(1));
}

namespace {

absl::StatusOr<NetworkPolicy> ParseNetwork(const std::string& name) {
  if (name == "open") return NetworkPolicy::kOpen;
  if (name == "proxy_only") return NetworkPolicy::kProxyOnly;
  if (name == "none") return NetworkPolicy::kNone;
  return absl::InvalidArgumentError(absl::StrCat("default_network '", name, "' must be open, proxy_only or none"));
}

}  // namespace

absl::Status ValidateConfig(const Config& config) {
  CORRAL_RETURN_IF_ERROR(ValidateServerConfig(config.server));
  CORRAL_RETURN_IF_ERROR(ParseNetwork(config.default_network).status());
  if (config.host.default_exec_timeout > config.host.max_exec_timeout) {
    return absl::InvalidArgumentError("default_exec_timeout must not be above max_exec_timeout");
  }
  if (config.host.default_disk_bytes > config.host.max_disk_bytes) {
    return absl::InvalidArgumentError("default_disk_bytes must not be above max_disk_bytes");
  }
  if (config.uid_last < config.uid_first) return absl::InvalidArgumentError("uid_last must not be below uid_first");
  if (config.host.root.empty() || config.host.root[0] != '/') {
    return absl::InvalidArgumentError("root must be an absolute path");
  }
  if (config.host.root == "/tmp" || absl::StartsWith(config.host.root, "/tmp/")) {
    return absl::InvalidArgumentError("root must not be under /tmp: inside a sandbox's view /tmp is its own");
  }
  return absl::OkStatus();
}

HostOptions EffectiveHostOptions(const Config& config) {
  HostOptions host = config.host;
  host.default_network = ParseNetwork(config.default_network).value_or(NetworkPolicy::kNone);
  host.templates.max_bytes = static_cast<uint64_t>(config.max_template_bytes);
  host.uid_first = static_cast<uid_t>(config.uid_first);
  host.uid_last = static_cast<uid_t>(config.uid_last);
  host.harness_root = config.harness_root;
  return host;
}

std::string EffectiveHostId(const Config& config) {
  if (!config.host_id.empty()) return config.host_id;
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace corral::sandbox
