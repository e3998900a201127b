#include "services/proxy/proxy_journal.h"

#include "absl/strings/str_cat.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "libs/core/status_macros.h"
#include "libs/journal/record_fields.h"

namespace corral::proxy {
namespace {

namespace asio = boost::asio;

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS sessions (
  env_id TEXT PRIMARY KEY,
  request BLOB NOT NULL,
  open_ns INTEGER NOT NULL,
  close_reason INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS recorded_calls (
  env_id TEXT NOT NULL REFERENCES sessions(env_id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  record BLOB NOT NULL,
  PRIMARY KEY (env_id, seq)
);
)sql";

// A change is journaled as one record (the log's and SQLite's unit): a kind byte, then fixed fields.
enum class Kind : char { kOpened = 'S', kClosed = 'C', kDropped = 'D', kCall = 'R' };

std::string Header(Kind kind, absl::string_view env_id, size_t reserve = 0) {
  std::string out;
  out.reserve(1 + 8 + env_id.size() + 8 + reserve);
  out.push_back(static_cast<char>(kind));
  PutRecordField(out, env_id);
  return out;
}

// Applies one record. Replaying a log's records in order, to its end, over a database that already holds some of
// them gives the same database (OR IGNORE; a call only lands in a session that still exists: one acknowledged
// meanwhile is gone for good). Live, with or without the log, a call for a session acknowledged meanwhile is
// dropped the same way instead of failing.
absl::Status ApplyRecord(absl::string_view record, sqlite3* db) {
  if (record.empty()) return absl::DataLossError("an empty journal record");
  RecordReader f(record.substr(1));
  const absl::string_view env_id = f.Field();
  absl::Status status = absl::DataLossError("a journal record of unknown kind");
  switch (static_cast<Kind>(record[0])) {
    case Kind::kOpened: {
      const int64_t open_ns = static_cast<int64_t>(f.U64());
      const absl::string_view request = f.Field();
      if (!f.ok()) break;
      status = CachedStatement(db, "INSERT OR IGNORE INTO sessions (env_id, request, open_ns) VALUES (?, ?, ?)")
                   .Bind(1, env_id)
                   .BindBlob(2, request)
                   .Bind(3, open_ns)
                   .Run();
      break;
    }
    case Kind::kClosed: {
      const int64_t reason = static_cast<int64_t>(f.U64());
      if (!f.ok()) break;
      status = CachedStatement(db, "UPDATE sessions SET close_reason = ? WHERE env_id = ?")
                   .Bind(1, reason)
                   .Bind(2, env_id)
                   .Run();
      break;
    }
    case Kind::kDropped: {  // env_id is the first; the others follow
      Statement& st = CachedStatement(db, "DELETE FROM sessions WHERE env_id = ?");
      status = st.Bind(1, env_id).Run();
      while (status.ok() && f.ok() && !f.empty()) status = st.Bind(1, f.Field()).Run();
      break;
    }
    case Kind::kCall: {
      const int64_t seq = static_cast<int64_t>(f.U64());
      const absl::string_view call = f.Field();
      if (!f.ok()) break;
      status = CachedStatement(db,
                               "INSERT OR IGNORE INTO recorded_calls (env_id, seq, record) SELECT ?1, ?2, ?3 "
                               "WHERE EXISTS (SELECT 1 FROM sessions WHERE env_id = ?1)")
                   .Bind(1, env_id)
                   .Bind(2, seq)
                   .BindBlob(3, call)
                   .Run();
      break;
    }
  }
  if (!f.ok()) return absl::DataLossError("a journal record is cut short");
  return status;
}

}  // namespace

std::string EncodeCall(const RecordedCall& call) { return call.SerializeAsString(); }

absl::StatusOr<RecordedCall> DecodeCall(const std::string& bytes) {
  RecordedCall call;
  if (!call.ParseFromString(bytes) || !call.has_call()) return absl::DataLossError("a journaled call is corrupt");
  return call;
}

absl::StatusOr<std::unique_ptr<ProxyJournal>> ProxyJournal::Open(const std::string& path, bool fsync) {
  CORRAL_ASSIGN_OR_RETURN(std::unique_ptr<Journal> j, Journal::Open(path, kSchema, fsync, ApplyRecord));
  return std::unique_ptr<ProxyJournal>(new ProxyJournal(std::move(j)));
}

void ProxyJournal::Change(std::string record, Journal::Done done) {
  if (auto at_once = journal_->Append(std::move(record), done)) done(*at_once);
}

void ProxyJournal::PutSession(const v1::OpenSessionRequest& request, absl::Time open_time, Journal::Done done) {
  std::string record = Header(Kind::kOpened, request.env_id(), request.ByteSizeLong() + 16);
  PutRecordU64(record, static_cast<uint64_t>(absl::ToUnixNanos(open_time)));
  PutRecordField(record, request.SerializeAsString());
  Change(std::move(record), std::move(done));
}

void ProxyJournal::CloseSession(const std::string& env_id, v1::CloseReason reason, Journal::Done done) {
  std::string record = Header(Kind::kClosed, env_id);
  PutRecordU64(record, static_cast<uint64_t>(reason));
  Change(std::move(record), std::move(done));
}

void ProxyJournal::DropSessions(std::vector<std::string> env_ids, Journal::Done done) {
  if (env_ids.empty()) return done(absl::OkStatus());
  std::string record = Header(Kind::kDropped, env_ids[0]);
  for (size_t i = 1; i < env_ids.size(); ++i) PutRecordField(record, env_ids[i]);
  Change(std::move(record), std::move(done));
}

asio::awaitable<absl::Status> ProxyJournal::AppendCall(const std::string& env_id, const RecordedCall& call) {
  const size_t size = call.ByteSizeLong();
  std::string record = Header(Kind::kCall, env_id, size + 16);
  PutRecordU64(record, call.call().seq());
  PutRecordU64(record, size);
  call.AppendToString(&record);
  // Usually answered at once (logged). Otherwise the writer thread signals the waiting coroutine by cancelling a
  // timer on the coroutine's own executor, so `wait` is only touched on that executor.
  // (The HTTP server runs one thread per io_context, so the handler and this coroutine never run at once.)
  auto executor = co_await asio::this_coro::executor;
  struct Wait {
    explicit Wait(const asio::any_io_executor& e) : timer(e, asio::steady_timer::time_point::max()) {}
    absl::Status status = absl::UnknownError("not committed");
    bool committed = false;
    asio::steady_timer timer;
  };
  auto wait = std::make_shared<Wait>(executor);
  std::optional<absl::Status> at_once = journal_->Append(std::move(record), [executor, wait](absl::Status s) {
    asio::post(executor, [wait, s = std::move(s)] {
      wait->status = s;
      wait->committed = true;
      wait->timer.cancel();
    });
  });
  if (at_once) co_return *at_once;
  while (!wait->committed) co_await wait->timer.async_wait(asio::as_tuple(asio::use_awaitable));
  co_return wait->status;
}

absl::StatusOr<int> ProxyJournal::Load(SessionStore& store) {
  // What is logged but not yet applied is committed first, so the database holds every change answered so far.
  CORRAL_RETURN_IF_ERROR(journal_->Apply([](sqlite3*) { return absl::OkStatus(); }));
  int sessions = 0;
  absl::Status status = journal_->Read([&](sqlite3* db) -> absl::Status {
    Statement st(db, "SELECT env_id, request, open_ns, close_reason FROM sessions ORDER BY env_id");
    Statement calls(db, "SELECT record FROM recorded_calls WHERE env_id = ? ORDER BY seq");
    while (true) {
      CORRAL_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      v1::OpenSessionRequest request;
      if (!request.ParseFromString(st.Text(1))) return absl::DataLossError("a journaled session is corrupt");
      std::shared_ptr<Session> session = store.Restore(request, absl::FromUnixNanos(st.Int(2)));
      calls.Bind(1, st.Text(0));
      while (true) {
        CORRAL_ASSIGN_OR_RETURN(bool call_row, calls.Step());
        if (!call_row) break;
        CORRAL_ASSIGN_OR_RETURN(RecordedCall call, DecodeCall(calls.Text(0)));
        session->Replay(std::move(call));
      }
      calls.Reset();
      if (st.Int(3) != 0) (void)store.Close(request.env_id(), static_cast<v1::CloseReason>(st.Int(3)));
      ++sessions;
    }
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return sessions;
}

}  // namespace corral::proxy
