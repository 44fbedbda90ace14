// Internal to db/: the SQLite plumbing the store's files share (statements, transactions, errors), and what
// each file offers the others: the schema and the checks that keep foreign or damaged files untouched
// (schema.cpp), the run's writing process (run_writer.cpp), the profile's rows (profile_rows.cpp). The
// public interface is db/results_db.h.
#pragma once
#include <sqlite3.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "db/results_db.h"

namespace moc::db::internal {

// Readers wait this long for a writer's lock (a checkpoint, a migration) instead of failing at once.
constexpr int kBusyTimeoutMs = 10'000;

inline std::string in_quotes(const std::string& path) { return "'" + path + "'"; }

// A failed SQLite call, with its result code so open() can tell a corrupt file from other failures.
class SqliteError : public DbError {
 public:
  SqliteError(const std::string& message, int code)
      : DbError(message, (code & 0xff) == SQLITE_BUSY || (code & 0xff) == SQLITE_LOCKED), code_(code) {}
  int primary_code() const { return code_ & 0xff; }

 private:
  int code_;
};

[[noreturn]] inline void fail(sqlite3* db, const std::string& path, std::string_view what) {
  throw SqliteError(in_quotes(path) + ": " + std::string(what) + ": " + sqlite3_errmsg(db),
                    sqlite3_extended_errcode(db));
}

// One prepared statement; `what` names the operation in error messages.
class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& path, const char* sql, std::string what)
      : db_(db), path_(path), what_(std::move(what)) {
    if (sqlite3_prepare_v2(db_, sql, -1, &s_, nullptr) != SQLITE_OK) fail(db_, path_, what_);
  }
  ~Stmt() { sqlite3_finalize(s_); }  // its code repeats the last step's, which was checked
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& bind(int i, std::int64_t v) { return check(sqlite3_bind_int64(s_, i, v)); }
  Stmt& bind(int i, int v) { return check(sqlite3_bind_int(s_, i, v)); }
  Stmt& bind_null(int i) { return check(sqlite3_bind_null(s_, i)); }
  // SQLite would store NaN as NULL anyway; doing it here makes that explicit (column() maps it back).
  Stmt& bind(int i, double v) {
    return check(std::isnan(v) ? sqlite3_bind_null(s_, i) : sqlite3_bind_double(s_, i, v));
  }
  Stmt& bind(int i, const std::string& v) {
    return check(sqlite3_bind_text64(s_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
  }

  // true: a row is ready; false: done.
  bool step(std::string_view item = {}) {
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail(db_, path_, item.empty() ? what_ : what_ + " (" + std::string(item) + ")");
  }
  // Runs the statement to completion and readies it for new bindings. `item` says which row failed.
  void exec(std::string_view item = {}) {
    while (step(item)) {
    }
    reset();
  }
  // exec() for one of many rows: the message (built only on failure) says "<noun> <index>".
  void exec_row(const char* noun, std::size_t index) {
    int rc;
    while ((rc = sqlite3_step(s_)) == SQLITE_ROW) {
    }
    if (rc != SQLITE_DONE) fail(db_, path_, what_ + " (" + noun + " " + std::to_string(index) + ")");
    reset();
  }
  // Readies a statement stepped part-way (or to the end) for new bindings.
  void reset() {
    if (sqlite3_reset(s_) != SQLITE_OK) fail(db_, path_, what_);
  }

  std::int64_t i64(int c) const { return sqlite3_column_int64(s_, c); }
  int i32(int c) const { return sqlite3_column_int(s_, c); }
  bool is_null(int c) const { return sqlite3_column_type(s_, c) == SQLITE_NULL; }
  double f64(int c) const {
    return is_null(c) ? std::numeric_limits<double>::quiet_NaN() : sqlite3_column_double(s_, c);
  }
  std::string text(int c) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, c));
    if (p == nullptr) {
      if (sqlite3_errcode(db_) == SQLITE_NOMEM) fail(db_, path_, what_);
      return {};
    }
    return {p, static_cast<std::size_t>(sqlite3_column_bytes(s_, c))};
  }

 private:
  Stmt& check(int rc) {
    if (rc != SQLITE_OK) fail(db_, path_, what_ + " (binding a value)");
    return *this;
  }
  sqlite3* db_;
  const std::string& path_;
  std::string what_;
  sqlite3_stmt* s_ = nullptr;
};

// SQLite integers are signed 64-bit: unsigned CUPTI ids are stored as their int64 value (uint64 ids above
// 2^63 as negative numbers) and read back by the inverse conversion, so they round-trip exactly.
inline std::int64_t u32(std::uint32_t v) { return static_cast<std::int64_t>(v); }
inline std::int64_t u64(std::uint64_t v) { return static_cast<std::int64_t>(v); }
inline std::uint32_t to_u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }
inline std::uint64_t to_u64(std::int64_t v) { return static_cast<std::uint64_t>(v); }

// BEGIN ... COMMIT, rolled back when left without commit() (an exception).
class Transaction {
 public:
  // begin_sql: "BEGIN IMMEDIATE" to write (takes the write lock now, so the transaction cannot fail
  // half-way for lack of it), "BEGIN" for a consistent snapshot across several reads.
  Transaction(sqlite3* db, const std::string& path, const char* begin_sql, std::string what)
      : db_(db), path_(path), what_(std::move(what)) {
    Stmt(db_, path_, begin_sql, "starting a transaction for " + what_).exec();
  }
  ~Transaction() {
    // Cannot throw here. Some errors roll back by themselves (hence the autocommit test); should
    // ROLLBACK itself fail, the next BEGIN fails with a DbError saying a transaction is open.
    if (!committed_ && sqlite3_get_autocommit(db_) == 0) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit() {
    Stmt(db_, path_, "COMMIT", "committing " + what_).exec();
    committed_ = true;
  }

 private:
  sqlite3* db_;
  const std::string& path_;
  std::string what_;
  bool committed_ = false;
};

inline void exec_script(sqlite3* db, const std::string& path, const char* sql, const std::string& what) {
  while (sql != nullptr && *sql != '\0') {
    sqlite3_stmt* s = nullptr;
    const char* tail = nullptr;
    if (sqlite3_prepare_v2(db, sql, -1, &s, &tail) != SQLITE_OK) fail(db, path, what);
    if (s != nullptr) {  // null for trailing whitespace or comments
      int rc;
      while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      }
      sqlite3_finalize(s);
      if (rc != SQLITE_DONE) fail(db, path, what);
    }
    sql = tail;
  }
}


// schema.cpp: the schema's migrations and the checks run before anything is written.
struct FileState {
  std::int32_t application_id = 0;
  int version = 0;
  std::vector<std::string> tables;
  bool blank() const { return application_id == 0 && version == 0 && tables.empty(); }
};

FileState inspect(sqlite3* db, const std::string& path);
// Refuses what this build must not write or read; returns normally for a blank file or one of ours.
void check_ours(const std::string& path, const FileState& s, OpenMode mode);
// Brings a blank or older file to kSchemaVersion in one transaction.
void migrate(sqlite3* db, const std::string& path);
// What SQLite would find late or never: a file that is not SQLite at all, or one cut short.
void check_file_header(const std::string& path, std::uintmax_t size);
// PRAGMA quick_check(max): "ok", or its findings "; "-separated.
std::string quick_check_verdict(sqlite3* raw, const std::string& path, int max);
[[noreturn]] void refuse_corrupt(const std::string& path, const std::string& why);
[[noreturn]] void refuse_not_ours(const std::string& path, const std::string& why);

// run_writer.cpp: which process writes a run, and runs whose process is gone.
RunWriter read_writer(const Stmt& q, int first_column);
std::int64_t now_unix_ms();
// A "running" run whose process is gone reads as abandoned. `here` is looked up on first need.
void report_abandoned(RunRecord& r, std::optional<RunWriter>& here);
// The next writer records what readers infer, so the file itself says so.
void mark_abandoned(sqlite3* db, const std::string& path);

// profile_rows.cpp: a point's profile as nsys-style rows, written inside add_point's transaction and read back.
void write_trace(sqlite3* db, const std::string& path, std::int64_t point_id, const prof::ProfileTrace& t,
                 const std::string& of);
std::optional<prof::ProfileTrace> read_trace(sqlite3* db, const std::string& path, std::int64_t point_id,
                                             int schema_version);

}  // namespace moc::db::internal
