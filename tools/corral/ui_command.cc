// `corral ui`: where the rollout inspector is — the scheduler's HTTP port, from the local cluster or --url — as a
// link to paste into a browser, with the cluster token in it when the scheduler wants one.
#include <filesystem>
#include <iostream>

#include "tools/corral/commands.h"
#include "tools/corral/connect_flags.h"
#include "tools/corral/output.h"
#include "tools/corral/ui_link.h"

namespace corral::cli {
namespace {

struct UiFlags {
  std::string url;
  std::string cluster_dir = ".corral";
  std::string secret_file;
  std::string batch;
  std::string episode;
};

int RunUi(UiFlags f) {
  if (f.url.empty()) {
    const std::string http = LocalClusterAddress(f.cluster_dir, "scheduler", "http");
    if (http.empty()) {
      std::cerr << "corral ui: no local cluster in " << f.cluster_dir
                << " (or its scheduler serves no inspector): start one with `corral up`, or pass --url\n";
      return 1;
    }
    f.url = "http://" + http;
    if (f.secret_file.empty() && std::filesystem::exists(f.cluster_dir + "/secret"))
      f.secret_file = f.cluster_dir + "/secret";
  }
  auto link = InspectorLink(f.url, f.secret_file, f.batch, f.episode);
  if (!link.ok()) return Fail("ui", link.status());
  std::cout << *link << "\n";
  return 0;
}

}  // namespace

void RegisterUi(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<UiFlags>();
  CLI::App* ui = app.add_subcommand("ui", "print the rollout inspector's address (a link to open in a browser)");
  ui->add_option("--url", f->url, "the scheduler's inspector, http://HOST:PORT (default: the local cluster's)");
  ui->add_option("--cluster-dir", f->cluster_dir, "the local cluster's directory (corral up --dir)")
      ->capture_default_str();
  ui->add_option("--secret-file", f->secret_file,
                 "cluster secret, to put the token in the link (needed when the inspector is not on loopback)");
  ui->add_option("--batch", f->batch, "link straight to this batch");
  ui->add_option("--episode", f->episode, "link straight to this episode");
  ui->callback([f, &exit_code] { exit_code = RunUi(*f); });
}

}  // namespace corral::cli
