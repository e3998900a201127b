#include "services/sandbox_api/config.h"

#include <algorithm>
#include <cstdlib>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "libs/core/host_port.h"
#include "libs/core/status_macros.h"
#include "services/sandbox_api/run_code.h"
#include "yaml-cpp/yaml.h"

namespace corral::sandbox_api {

void RegisterConfig(ConfigSchema& schema, Config* c) {
  c->server.grpc_listen = "127.0.0.1:7800";
  c->server.metrics_listen = "127.0.0.1:9800";
  if (const char* pod = std::getenv("MY_POD_NAME")) c->executor_name = pod;
  RegisterServerFlags(schema, &c->server);
  schema.String("http_listen", &c->http_listen,
                "HOST:PORT of the HTTP endpoint (SandboxFusion's /run_code; port 0: the kernel chooses)");
  schema.Int("http_threads", &c->http_threads, "HTTP I/O threads", 1, 64);
  schema.Int("max_body_bytes", &c->max_body_bytes, "largest request body accepted (413 beyond)", 1024,
             int64_t{1} << 30);
  schema.String("scheduler", &c->scheduler, "HOST:PORT of corral-scheduler, which leases the sandboxes");
  schema.String("ratelimiter", &c->ratelimiter,
                "HOST:PORT of corral-ratelimiter, whose code_limit bounds /run_code across replicas (empty: none)");
  schema.String("code_limit", &c->code_limit,
                "the ratelimiter's concurrency limit held by each /run_code run, keyed by its language (declared as "
                "NAME/{language}; the scheduler's tool_limit is the same one by default)");
  schema.Bool("limiter_fail_open", &c->limiter_fail_open,
              "run without a permit while the ratelimiter cannot be reached (default: wait for it)");
  schema.Duration("wait", &c->wait,
                  "how long a /run_code call waits for a permit and a sandbox before answering 504 (verl retries "
                  "504)",
                  absl::Seconds(1), absl::Minutes(10));
  schema.String("image", &c->image, "the image /run_code's sandboxes run (empty: the host's own toolchains)");
  schema.Custom("images", "map", "{}",
                "per language, the image whose toolchain runs it, e.g. {go: golang:1.22, rust: rust:1.80} (other "
                "languages: `image`)",
                [c](const YAML::Node& node) -> absl::Status {
                  if (!node.IsMap()) return absl::InvalidArgumentError("must be a map of language: image");
                  std::map<std::string, std::string> images;
                  for (const auto& kv : node) {
                    if (!kv.second.IsScalar()) return absl::InvalidArgumentError("each image must be a string");
                    images[kv.first.as<std::string>()] = kv.second.as<std::string>();
                  }
                  c->images = std::move(images);
                  return absl::OkStatus();
                });
  schema.Custom("prices", "map", "{}",
                "what a sandbox's usage costs, for GET /sandboxes/{id}/usage: {cpu_hour: N, gib_hour: N} (the "
                "scheduler's price table, whose tokens do not apply here); empty: no cost",
                [c](const YAML::Node& node) -> absl::Status {
                  CORRAL_ASSIGN_OR_RETURN(c->prices, PriceTableFromYaml(node));
                  return absl::OkStatus();
                });
  schema.String("executor_name", &c->executor_name, "reported as executor_pod_name (default: $MY_POD_NAME, else null)");
  schema.Bool("e2b_fork_ready", &c->e2b_fork_ready,
              "E2B processes on sandboxes on the host's filesystem start fork-ready, so that a fork keeps them "
              "running in every child; the programs they run cannot make user namespaces (a browser's own sandbox "
              "needs --no-sandbox). false: they start as any sandbox process, and a fork refuses while one runs");
  schema.String("e2b_image_metadata_key", &c->e2b_image_metadata_key,
                "a metadata key naming the OCI image of an E2B sandbox made from the default template, as slime "
                "sends it (e.g. image; empty: none)");
}

absl::Status ValidateConfig(Config& c) {
  CORRAL_RETURN_IF_ERROR(ValidateServerConfig(c.server));
  if (!SplitHostPort(c.http_listen).ok()) {
    return absl::InvalidArgumentError(absl::StrCat("http_listen '", c.http_listen, "' is not HOST:PORT"));
  }
  if (!SplitHostPort(c.scheduler).ok()) {
    return absl::InvalidArgumentError(absl::StrCat("scheduler '", c.scheduler, "' is not HOST:PORT"));
  }
  if (!c.ratelimiter.empty() && !SplitHostPort(c.ratelimiter).ok()) {
    return absl::InvalidArgumentError(absl::StrCat("ratelimiter '", c.ratelimiter, "' is not HOST:PORT"));
  }
  if (c.code_limit.empty()) return absl::InvalidArgumentError("code_limit must name a ratelimiter limit");
  for (const auto& [language, image] : c.images) {
    const auto languages = SandboxFusionLanguages();
    if (std::find(languages.begin(), languages.end(), language) == languages.end()) {
      return absl::InvalidArgumentError(absl::StrCat("images: '", language, "' is not a SandboxFusion language"));
    }
    if (image.empty() || image.size() > 512 || absl::c_any_of(image, [](char ch) { return ch <= ' ' || ch == 0x7f; })) {
      return absl::InvalidArgumentError(
          absl::StrCat("images['", language, "'] must be an image name or digest (no spaces, at most 512 characters)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace corral::sandbox_api
