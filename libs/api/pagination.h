// What every List RPC shares (common.proto, "Pagination"): the page-size rule (0 -> 100, above 1000 -> 1000,
// negative -> INVALID_ARGUMENT), paging by key after a page token, and label selectors.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace corral {

inline absl::StatusOr<int> PageSize(int32_t requested) {
  if (requested < 0) return absl::InvalidArgumentError("page_size must not be negative");
  return requested == 0 ? 100 : std::min<int>(requested, 1000);
}

// One page of a List RPC over `items` ordered by key: skips the items up to `page_token` and those `match`
// rejects, calls `add` for the next `page_size` ones, and returns the next page token (the key of the last item
// added) when another matching item follows, "" at the end.
template <class Items, class Key, class Match, class Add>
std::string FillPage(const Items& items, const std::string& page_token, int page_size, Key key, Match match, Add add) {
  int added = 0;
  std::string last;
  for (const auto& item : items) {
    std::string k = key(item);
    if ((!page_token.empty() && k <= page_token) || !match(item)) continue;
    if (added == page_size) return last;
    add(item);
    last = std::move(k);
    ++added;
  }
  return "";
}

// True when `labels` has every key of `selector` with the same value (label_selector of the List RPCs).
template <class Selector, class Labels>
bool MatchesLabels(const Selector& selector, const Labels& labels) {
  for (const auto& [k, v] : selector) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  return true;
}

}  // namespace corral
