#include "services/proxy/proxy_journal.h"

#include "absl/strings/str_cat.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "libs/core/status_macros.h"

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

}  // namespace

std::string EncodeCall(const RecordedCall& call) { return call.SerializeAsString(); }

absl::StatusOr<RecordedCall> DecodeCall(const std::string& bytes) {
  RecordedCall call;
  if (!call.ParseFromString(bytes) || !call.has_call()) return absl::DataLossError("a journaled call is corrupt");
  return call;
}

absl::StatusOr<std::unique_ptr<ProxyJournal>> ProxyJournal::Open(const std::string& path, bool fsync) {
  CORRAL_ASSIGN_OR_RETURN(std::unique_ptr<Journal> j, Journal::Open(path, kSchema, fsync));
  return std::unique_ptr<ProxyJournal>(new ProxyJournal(std::move(j)));
}

void ProxyJournal::PutSession(const v1::OpenSessionRequest& request, absl::Time open_time, Journal::Done done) {
  journal_->Submit(
      [env_id = request.env_id(), bytes = request.SerializeAsString(), open_ns = absl::ToUnixNanos(open_time)](
          sqlite3* db) {
        Statement& st = CachedStatement(db, "INSERT OR IGNORE INTO sessions (env_id, request, open_ns) VALUES (?, ?, ?)");
        return st.Bind(1, env_id).BindBlob(2, bytes).Bind(3, open_ns).Run();
      },
      std::move(done));
}

void ProxyJournal::CloseSession(const std::string& env_id, v1::CloseReason reason, Journal::Done done) {
  journal_->Submit(
      [env_id, reason](sqlite3* db) {
        Statement& st = CachedStatement(db, "UPDATE sessions SET close_reason = ? WHERE env_id = ?");
        return st.Bind(1, static_cast<int64_t>(reason)).Bind(2, env_id).Run();
      },
      std::move(done));
}

void ProxyJournal::DropSessions(std::vector<std::string> env_ids, Journal::Done done) {
  journal_->Submit(
      [env_ids = std::move(env_ids)](sqlite3* db) -> absl::Status {
        Statement& st = CachedStatement(db, "DELETE FROM sessions WHERE env_id = ?");
        for (const auto& id : env_ids) CORRAL_RETURN_IF_ERROR(st.Bind(1, id).Run());
        return absl::OkStatus();
      },
      std::move(done));
}

asio::awaitable<absl::Status> ProxyJournal::AppendCall(const std::string& env_id, const RecordedCall& call) {
  // The writer thread signals the waiting coroutine by cancelling a timer on the coroutine's own executor.
  auto executor = co_await asio::this_coro::executor;
  auto timer = std::make_shared<asio::steady_timer>(executor, asio::steady_timer::time_point::max());
  auto result = std::make_shared<absl::Status>(absl::UnknownError("not committed"));
  auto committed = std::make_shared<std::atomic<bool>>(false);
  journal_->Submit(
      [env_id, seq = static_cast<int64_t>(call.call().seq()), bytes = EncodeCall(call)](sqlite3* db) {
        Statement& st = CachedStatement(db, "INSERT INTO recorded_calls (env_id, seq, record) VALUES (?, ?, ?)");
        return st.Bind(1, env_id).Bind(2, seq).BindBlob(3, bytes).Run();
      },
      [executor, timer, result, committed](absl::Status s) {
        asio::post(executor, [timer, result, committed, s = std::move(s)] {
          *result = s;
          *committed = true;
          timer->cancel();
        });
      });
  while (!*committed) co_await timer->async_wait(asio::as_tuple(asio::use_awaitable));
  co_return *result;
}

absl::StatusOr<int> ProxyJournal::Load(SessionStore& store) {
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
