#include "libs/rpc/process_metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace corral {
namespace {

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type, double value) {
  prometheus::MetricFamily family{name, help, type, {}};
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(metric);
  return family;
}

double BootTimeSeconds() {
  std::ifstream in("/proc/stat");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("btime ", 0) == 0) {
      double v = 0;
      if (absl::SimpleAtod(line.substr(6), &v)) return v;
    }
  }
  return 0;
}

int CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  int n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the descriptor opendir itself holds
}

}  // namespace

std::vector<prometheus::MetricFamily> ProcessMetrics::Collect() const {
  std::ifstream in("/proc/self/stat");
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string stat = buffer.str();
  // Fields after the command name, which is in parentheses and may itself contain spaces.
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return {};
  std::vector<std::string> f = absl::StrSplit(stat.substr(close + 2), ' ');
  // f[0] is field 3 (state): utime=14, stime=15, num_threads=20, starttime=22, rss=24.
  auto field = [&](int index) {
    double v = 0;
    size_t i = static_cast<size_t>(index - 3);
    if (i < f.size()) (void)absl::SimpleAtod(f[i], &v);
    return v;
  };
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  using prometheus::MetricType;
  return {
      Family("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", MetricType::Counter,
             (field(14) + field(15)) / ticks),
      Family("process_resident_memory_bytes", "Resident memory size in bytes.", MetricType::Gauge, field(24) * page),
      Family("process_open_fds", "Number of open file descriptors.", MetricType::Gauge, CountOpenFds()),
      Family("process_threads", "Number of OS threads in the process.", MetricType::Gauge, field(20)),
      Family("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", MetricType::Gauge,
             BootTimeSeconds() + field(22) / ticks),
  };
}

}  // namespace corral
