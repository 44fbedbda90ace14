// Which process writes a run (host, boot, pid namespace, pid, start time), whether it still lives, and the
// runs whose process is gone: read as abandoned, recorded so by the next writer.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "db/store_sql.h"

namespace moc::db {

namespace {

// /proc/<pid>/stat: the process's state (field 3) and start time (field 22, clock ticks since boot).
struct ProcStat {
  char state = '?';
  std::int64_t start_ticks = 0;
};

std::optional<ProcStat> proc_stat(std::int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  // Field 2 is the command name in parentheses, which may itself hold spaces and ')': fields 3... follow
  // the last ')'.
  const auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 1));
  ProcStat st;
  std::string skip;
  fields >> st.state;
  for (int field = 4; field < 22; ++field) fields >> skip;
  fields >> st.start_ticks;
  if (!fields) return std::nullopt;
  return st;
}

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}


}  // namespace

namespace internal {

RunWriter read_writer(const Stmt& q, int first_column) {
  RunWriter w;
  w.host = q.text(first_column);
  w.boot_id = q.text(first_column + 1);
  w.pid_namespace = q.text(first_column + 2);
  w.pid = q.i64(first_column + 3);
  w.start_ticks = q.i64(first_column + 4);
  return w;
}

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Why a run of `w` is abandoned (writer_state(w, here) == gone), for RunRecord::error.
std::string abandoned_because(const RunWriter& w, const RunWriter& here) {
  const std::string process = "process " + std::to_string(w.pid) + " on " + w.host;
  if (w.boot_id != here.boot_id) return process + " ended when the host restarted, before finishing the run";
  return process + " ended without finishing the run (killed, out of memory, or crashed)";
}

// A "running" run whose process is gone reads as abandoned. `here` is looked up on first need.
void report_abandoned(RunRecord& r, std::optional<RunWriter>& here) {
  if (r.status != "running" || r.writer.pid == 0) return;
  if (!here) here = this_process();
  if (writer_state(r.writer, *here) != WriterState::gone) return;
  r.status = "abandoned";
  r.error = abandoned_because(r.writer, *here);
}

// The next writer records what readers infer, so the file itself says so (to a copy read on another host
// too). Once gone a process never comes back, so looking before the write lock is safe; a run finished
// meanwhile is left alone.
void mark_abandoned(sqlite3* db, const std::string& path) {
  std::vector<std::pair<std::int64_t, std::string>> dead;  // run id, why
  {
    Stmt q(db, path,
           "SELECT id, host, boot_id, pid_namespace, pid, process_start_ticks FROM runs "
           "WHERE status = 'running' AND pid <> 0 ORDER BY id",
           "looking for runs whose process is gone");
    std::optional<RunWriter> here;
    while (q.step()) {
      const RunWriter w = read_writer(q, 1);
      if (!here) here = this_process();
      if (writer_state(w, *here) == WriterState::gone) dead.emplace_back(q.i64(0), abandoned_because(w, *here));
    }
  }
  if (dead.empty()) return;
  Transaction tx(db, path, "BEGIN IMMEDIATE", "marking abandoned runs");
  Stmt u(db, path,
         "UPDATE runs SET status = 'abandoned', finished_unix_ms = ?, error = ? WHERE id = ? AND status = 'running'",
         "marking abandoned runs");
  const std::int64_t now = now_unix_ms();
  for (const auto& [id, why] : dead) u.bind(1, now).bind(2, why).bind(3, id).exec("run " + std::to_string(id));
  tx.commit();
}

}  // namespace internal

RunWriter this_process() {
  RunWriter w;
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) == 0) w.host = host.data();
  w.boot_id = first_line("/proc/sys/kernel/random/boot_id");
  std::error_code ec;
  w.pid_namespace = std::filesystem::read_symlink("/proc/self/ns/pid", ec).string();
  w.pid = ::getpid();
  if (const auto st = proc_stat(w.pid)) w.start_ticks = st->start_ticks;
  return w;
}

WriterState writer_state(const RunWriter& w, const RunWriter& here) {
  // Only a process of this host can be looked up; a run from another host (a file copied from the GPU
  // machine) keeps its status.
  if (w.pid <= 0 || w.host.empty() || w.host != here.host) return WriterState::unknown;
  if (!w.boot_id.empty() && !here.boot_id.empty() && w.boot_id != here.boot_id) return WriterState::gone;
  // Pids name processes within one boot and one pid namespace (a container sharing the host's name does not
  // see the host's pids); without a start time a reused pid cannot be told from the writer.
  if (w.boot_id.empty() || w.boot_id != here.boot_id || w.pid_namespace != here.pid_namespace ||
      w.start_ticks == 0 || w.pid > std::numeric_limits<pid_t>::max())
    return WriterState::unknown;
  // kill(pid, 0) sees a process even where /proc hides other users' (hidepid); EPERM means it exists.
  if (::kill(static_cast<pid_t>(w.pid), 0) != 0 && errno == ESRCH) return WriterState::gone;
  const auto st = proc_stat(w.pid);
  if (!st) return WriterState::unknown;  // hidden by /proc, or it ended just now (the next look tells)
  // Another start time: the pid was reused. A zombie (killed, not yet reaped) writes nothing more.
  if (st->start_ticks != w.start_ticks || st->state == 'Z' || st->state == 'X') return WriterState::gone;
  return WriterState::alive;
}

}  // namespace moc::db
