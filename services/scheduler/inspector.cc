#include "services/scheduler/inspector.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "boost/json.hpp"
#include "google/protobuf/util/json_util.h"
#include "services/scheduler/episode/trajectory_forms.h"
#include "services/scheduler/table/submission.h"

namespace corral::scheduler {
namespace {

namespace json = boost::json;

json::value ProtoJson(const google::protobuf::Message& m) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &text, options);
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  return ec ? json::value(json::object()) : v;
}

json::value HistogramJson(const RewardHistogram& h) {
  json::array counts;
  for (uint32_t c : h.counts) counts.push_back(c);
  json::object o;
  o["lo"] = h.lo;
  o["hi"] = h.hi;
  o["counts"] = std::move(counts);
  return o;
}

// What the inspector shows of a task: its prompt, or its last user message.
std::string PromptOf(const v1::Task& task) {
  std::string prompt = task.prompt();
  if (prompt.empty()) {
    for (const auto& m : task.messages()) {
      if (m.role() == "user") prompt = m.content();
    }
  }
  constexpr size_t kMax = 400;
  if (prompt.size() > kMax) prompt = absl::StrCat(prompt.substr(0, kMax), "…");
  return prompt;
}

}  // namespace

RewardHistogram HistogramOf(const std::vector<double>& rewards, int bins) {
  RewardHistogram h;
  h.counts.assign(static_cast<size_t>(std::max(bins, 1)), 0);
  for (double r : rewards) {
    if (!std::isfinite(r)) continue;
    h.lo = std::min(h.lo, r);
    h.hi = std::max(h.hi, r);
  }
  const double width = (h.hi - h.lo) / static_cast<double>(h.counts.size());
  for (double r : rewards) {
    if (!std::isfinite(r)) continue;
    auto bin = static_cast<size_t>((r - h.lo) / width);
    ++h.counts[std::min(bin, h.counts.size() - 1)];  // hi falls in the last bin
  }
  return h;
}

absl::StatusOr<std::string> Inspector::BatchesJson(int32_t page_size, const std::string& page_token) const {
  v1::ListBatchesRequest request;
  request.set_page_size(page_size);
  request.set_page_token(page_token);
  auto page = table_->ListBatches(request);
  if (!page.ok()) return page.status();
  json::array batches;
  for (const auto& b : page->batches()) {
    std::vector<double> rewards;
    if (auto rows = table_->Episodes(b.batch_id()); rows.ok()) {
      for (const auto& row : *rows) {
        if (row.reward && !row.redundant) rewards.push_back(*row.reward);
      }
    }
    json::value item = ProtoJson(b);
    item.as_object()["reward_histogram"] = HistogramJson(HistogramOf(rewards));
    batches.push_back(std::move(item));
  }
  json::object out;
  out["batches"] = std::move(batches);
  out["next_page_token"] = page->next_page_token();
  return json::serialize(out);
}

absl::StatusOr<std::string> Inspector::BatchJson(const std::string& batch_id) const {
  auto batch = table_->GetBatch(batch_id);
  if (!batch.ok()) return batch.status();
  auto rows = table_->Episodes(batch_id);
  if (!rows.ok()) return rows.status();
  std::vector<double> rewards;
  json::array groups;
  for (size_t k = 0; k < rows->size();) {
    const uint32_t g = (*rows)[k].group_index;
    json::object group;
    group["group_index"] = g;
    group["group_id"] = GroupId(batch_id, g);
    group["task_id"] = (*rows)[k].task->id();
    group["prompt"] = PromptOf(*(*rows)[k].task);
    json::array episodes;
    double sum = 0;
    int n = 0;
    for (; k < rows->size() && (*rows)[k].group_index == g; ++k) {
      const auto& row = (*rows)[k];
      json::object e;
      e["episode_id"] = row.episode_id;
      e["index"] = row.index_in_group;
      e["state"] = row.state;
      e["status"] = row.status == v1::EPISODE_STATUS_UNSPECIFIED ? "" : v1::EpisodeStatus_Name(row.status);
      e["attempt"] = row.attempt;
      e["redundant"] = row.redundant;
      e["acked"] = row.acked;
      e["host"] = row.host;
      if (row.reward) {
        e["reward"] = *row.reward;
        if (!row.redundant) {
          rewards.push_back(*row.reward);
          sum += *row.reward;
          ++n;
        }
      }
      episodes.push_back(std::move(e));
    }
    if (n > 0) group["mean_reward"] = sum / n;
    group["episodes"] = std::move(episodes);
    groups.push_back(std::move(group));
  }
  json::object out;
  out["batch"] = ProtoJson(*batch);
  out["reward_histogram"] = HistogramJson(HistogramOf(rewards));
  out["groups"] = std::move(groups);
  return json::serialize(out);
}

absl::StatusOr<std::string> Inspector::EpisodeJson(const std::string& episode_id) const {
  const char* source = "table";
  auto bytes = table_->UnackedResult(episode_id);
  if (bytes.status().code() == absl::StatusCode::kOutOfRange) {
    source = "journal";
    bytes = archive_ ? archive_(episode_id) : absl::NotFoundError("acknowledged results are not retained");
  }
  if (!bytes.ok()) return bytes.status();
  v1::EpisodeResult result;
  if (!result.ParseFromString(*bytes))
    return absl::DataLossError(absl::StrCat("episode '", episode_id, "': corrupt result"));
  if (result.has_trajectory()) {
    *result.mutable_trajectory() = ConvertTrajectory(result.trajectory(), v1::TRAJECTORY_FORMAT_TRAJECTORY);
  }
  json::object out;
  out["source"] = source;
  out["result"] = ProtoJson(result);
  return json::serialize(out);
}

}  // namespace corral::scheduler
