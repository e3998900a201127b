// The proxy's durable state in a Journal (SQLite WAL, group commit, behind a record log unless fsync): sessions as
// opened (the request with its policy), their closing, and every recorded call — so a proxy restarted after
// kill -9 serves its open sessions and returns every completed call. A call's journal record is its RecordedCall
// (common.proto) as the session stored it. Thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "boost/asio/any_io_executor.hpp"
#include "boost/asio/awaitable.hpp"
#include "libs/journal/journal.h"
#include "services/proxy/sessions.h"

namespace corral::proxy {

class ProxyJournal {
 public:
  // `fsync`: survive machine crashes too (see Journal), not only the proxy being killed.
  static absl::StatusOr<std::unique_ptr<ProxyJournal>> Open(const std::string& path, bool fsync);

  // `done` runs once the change is durable (or failed): at once when it is logged, otherwise on the journal's
  // writer thread once it is committed.
  void PutSession(const v1::OpenSessionRequest& request, absl::Time open_time, Journal::Done done);
  void CloseSession(const std::string& env_id, v1::CloseReason reason, Journal::Done done);
  void DropSessions(std::vector<std::string> env_ids, Journal::Done done);
  // From a coroutine: resumes once the call is durable (logged, or committed with fsync or under backpressure).
  // `call` as its session stored it (seq, ids and node indices set).
  boost::asio::awaitable<absl::Status> AppendCall(const std::string& env_id, const RecordedCall& call);
  // Restores every journaled session (open and closed) with its calls into `store`. Returns how many.
  absl::StatusOr<int> Load(SessionStore& store);

  Journal& journal() { return *journal_; }

 private:
  explicit ProxyJournal(std::unique_ptr<Journal> j) : journal_(std::move(j)) {}
  void Change(std::string record, Journal::Done done);
  std::unique_ptr<Journal> journal_;
};

std::string EncodeCall(const RecordedCall& call);
absl::StatusOr<RecordedCall> DecodeCall(const std::string& bytes);

}  // namespace corral::proxy
