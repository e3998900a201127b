// Reading a service's /metrics: a blocking GET and a strict parser for the Prometheus text exposition format
// (0.0.4) — every sample must belong to a family declared with # TYPE, label sets must be well-formed, values
// must be numbers. Tests check what /metrics says with it rather than grepping; `corral top` reads the proxy's.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace corral::http {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::map<std::string, std::string> types;  // family name → counter | gauge | histogram | summary | untyped
  std::vector<Sample> samples;
  // The value of the one sample with this name and exactly these labels; NOT_FOUND otherwise.
  absl::StatusOr<double> Value(const std::string& name, const std::map<std::string, std::string>& labels = {}) const;
};

// INVALID_ARGUMENT naming the line for anything malformed.
absl::StatusOr<Exposition> ParsePrometheusText(const std::string& text);

// GET http://host:port/path (IPv4 address) with a 10 s read timeout; returns the body of a 200 response.
absl::StatusOr<std::string> HttpGet(const std::string& host_port, const std::string& path);

}  // namespace corral::http
