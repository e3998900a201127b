// The scheduler's journal: sandbox templates and the files their builds read (SandboxTemplates).
#include "absl/strings/str_cat.h"
#include "libs/core/logging.h"
#include "libs/core/status_macros.h"
#include "services/scheduler/scheduler_journal.h"
#include "spdlog/spdlog.h"

namespace corral::scheduler {
namespace {

void LogFailed(const absl::Status& s, const char* what) {
  if (!s.ok()) spdlog::error("journal: {}: {}", what, s);
}

}  // namespace

void SchedulerJournal::SaveTemplate(const v1::SandboxTemplate& t, std::function<void(absl::Status)> done) {
  journal_->Submit(
      [id = t.template_id(), bytes = t.SerializeAsString()](sqlite3* db) {
        return CachedStatement(db, "INSERT OR REPLACE INTO templates (template_id, record) VALUES (?, ?)")
            .Bind(1, id)
            .BindBlob(2, bytes)
            .Run();
      },
      std::move(done));
}

void SchedulerJournal::DropTemplate(const std::string& template_id) {
  journal_->Submit(
      [template_id](sqlite3* db) {
        return CachedStatement(db, "DELETE FROM templates WHERE template_id = ?").Bind(1, template_id).Run();
      },
      [](absl::Status s) { LogFailed(s, "template removal"); });
}

void SchedulerJournal::SaveTemplateFile(const v1::TemplateFile& file, absl::Time time,
                                        std::function<void(absl::Status)> done) {
  journal_->Submit(
      [owner = file.owner(), hash = file.hash(), content = file.content(), ns = absl::ToUnixNanos(time)](sqlite3* db) {
        return CachedStatement(
                   db, "INSERT OR REPLACE INTO template_files (owner, hash, content, time_ns) VALUES (?, ?, ?, ?)")
            .Bind(1, owner)
            .Bind(2, hash)
            .BindBlob(3, content)
            .Bind(4, ns)
            .Run();
      },
      std::move(done));
}

void SchedulerJournal::DropTemplateFile(const std::string& owner, const std::string& hash) {
  journal_->Submit(
      [owner, hash](sqlite3* db) {
        return CachedStatement(db, "DELETE FROM template_files WHERE owner = ? AND hash = ?")
            .Bind(1, owner)
            .Bind(2, hash)
            .Run();
      },
      [](absl::Status s) { LogFailed(s, "template file removal"); });
}

absl::StatusOr<std::string> SchedulerJournal::LoadTemplateFile(const std::string& owner, const std::string& hash) {
  std::string content;
  bool found = false;
  CORRAL_RETURN_IF_ERROR(journal_->Read([&](sqlite3* db) -> absl::Status {
    Statement st(db, "SELECT content FROM template_files WHERE owner = ? AND hash = ?");
    st.Bind(1, owner);
    st.Bind(2, hash);
    CORRAL_ASSIGN_OR_RETURN(found, st.Step());
    if (found) content = st.Text(0);
    return absl::OkStatus();
  }));
  if (!found) return absl::NotFoundError(absl::StrCat("template file '", hash, "' not found"));
  return content;
}

absl::StatusOr<std::vector<v1::SandboxTemplate>> SchedulerJournal::LoadTemplates() {
  std::vector<v1::SandboxTemplate> templates;
  CORRAL_RETURN_IF_ERROR(journal_->Read([&](sqlite3* db) -> absl::Status {
    Statement rows(db, "SELECT record FROM templates ORDER BY template_id");
    for (;;) {
      CORRAL_ASSIGN_OR_RETURN(bool found, rows.Step());
      if (!found) return absl::OkStatus();
      if (!templates.emplace_back().ParseFromString(rows.Text(0))) {
        return absl::DataLossError("a journaled sandbox template is corrupt");
      }
    }
  }));
  return templates;
}

absl::StatusOr<std::vector<TemplateFileEntry>> SchedulerJournal::LoadTemplateFiles() {
  std::vector<TemplateFileEntry> files;
  CORRAL_RETURN_IF_ERROR(journal_->Read([&](sqlite3* db) -> absl::Status {
    Statement rows(db, "SELECT owner, hash, length(content), time_ns FROM template_files");
    for (;;) {
      CORRAL_ASSIGN_OR_RETURN(bool found, rows.Step());
      if (!found) return absl::OkStatus();
      files.push_back(TemplateFileEntry{rows.Text(0), rows.Text(1), static_cast<uint64_t>(rows.Int(2)),
                                        absl::FromUnixNanos(rows.Int(3))});
    }
  }));
  return files;
}

}  // namespace corral::scheduler
