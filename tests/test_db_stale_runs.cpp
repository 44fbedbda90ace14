// The results database's stale runs: a "running" run whose process is gone reads as abandoned, and the next
// writer marks it so (through the real executable: test_stale_runs.cpp).
#include <gtest/gtest.h>

#include "db_test_util.h"

namespace {

using namespace moc::dbtest;

// ---- stale runs: a "running" run whose process is gone reads as abandoned; the next writer marks it so

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The stored status of every run, as a third party reading the file sees it.
std::vector<std::string> stored_statuses(const std::string& path) {
  return RawDb(path).column("SELECT status FROM runs ORDER BY id");
}

// A child process that begins a run with one point, says so down a pipe, then waits to be killed. Returns
// its pid once the run is committed.
pid_t start_run_in_child(const std::string& path) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    try {
      auto db = ResultsDb::open(path, OpenMode::read_write);
      const auto run = db.begin_run(sample_run());
      db.add_point(sample_point(run, 0), sample_ranges(), sample_mem());
      const char byte = 'r';
      if (::write(fds[1], &byte, 1) != 1) ::_exit(1);
    } catch (...) {
      ::_exit(1);
    }
    for (;;) ::pause();  // never back into the test runner
  }
  ::close(fds[1]);
  char byte = 0;
  const bool ready = pid > 0 && ::read(fds[0], &byte, 1) == 1;
  ::close(fds[0]);
  if (pid > 0 && !ready) ::waitpid(pid, nullptr, 0);
  return ready ? pid : -1;
}

TEST_F(ResultsDbStaleRuns, RunOfAChildKilledBySigkillReadsAbandonedAndTheNextWriterMarksIt) {
  const auto path = file("results.db");
  const pid_t pid = start_run_in_child(path);
  ASSERT_GT(pid, 0) << "the child could not begin its run";
  {
    // While the child lives, its run is running, to readers and to another writer alike.
    auto writer = ResultsDb::open(path, OpenMode::read_write);
    EXPECT_EQ(writer.runs().at(0).status, "running");
    EXPECT_EQ(writer.runs().at(0).writer.pid, pid);
    EXPECT_EQ(stored_statuses(path), std::vector<std::string>{"running"});
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  {
    const auto db = ResultsDb::open(path, OpenMode::read_only);
    const auto runs = db.runs();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].status, "abandoned");
    EXPECT_EQ(runs[0].finished_unix_ms, 0) << "a reader does not know when it ended";
    EXPECT_NE(runs[0].error.find("process " + std::to_string(pid)), std::string::npos) << runs[0].error;
    EXPECT_EQ(db.run(runs[0].id), runs[0]);
    EXPECT_EQ(db.points(runs[0].id).size(), 1u) << "its committed point stays";
  }
  EXPECT_EQ(stored_statuses(path), std::vector<std::string>{"running"}) << "a reader changes nothing";

  const auto before = now_unix_ms();
  const auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto after = now_unix_ms();
  EXPECT_EQ(stored_statuses(path), std::vector<std::string>{"abandoned"});
  const auto run = db.runs().at(0);
  EXPECT_EQ(run.status, "abandoned");
  EXPECT_GE(run.finished_unix_ms, before);
  EXPECT_LE(run.finished_unix_ms, after);
  EXPECT_NE(run.error.find("process " + std::to_string(pid)), std::string::npos) << run.error;
}

TEST_F(ResultsDbStaleRuns, LiveRunOfThisProcessStaysRunning) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto other_writer = ResultsDb::open(path, OpenMode::read_write);
  EXPECT_EQ(other_writer.run(run)->status, "running");
  EXPECT_EQ(other_writer.run(run)->writer, moc::db::this_process());
  EXPECT_EQ(ResultsDb::open(path, OpenMode::read_only).runs().at(0).status, "running");
  EXPECT_EQ(stored_statuses(path), std::vector<std::string>{"running"});
  EXPECT_EQ(moc::db::writer_state(moc::db::this_process(), moc::db::this_process()), moc::db::WriterState::alive);
}

TEST_F(ResultsDbStaleRuns, RunOfAnExitedButUnreapedChildIsAbandoned) {
  const auto path = file("results.db");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      auto db = ResultsDb::open(path, OpenMode::read_write);
      db.begin_run(sample_run());
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);  // without finish_run
  }
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT), 0);  // a zombie now, not reaped
  ASSERT_EQ(info.si_status, 0);
  EXPECT_EQ(ResultsDb::open(path, OpenMode::read_only).runs().at(0).status, "abandoned");
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
}

TEST_F(ResultsDbStaleRuns, LivePidWithAnotherStartTimeIsAReusedPid) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  RawDb(path).exec("UPDATE runs SET process_start_ticks = process_start_ticks + 1");  // this pid, another process
  EXPECT_EQ(db.run(run)->status, "abandoned");
  ResultsDb::open(path, OpenMode::read_write);
  EXPECT_EQ(stored_statuses(path), std::vector<std::string>{"abandoned"});
}

TEST_F(ResultsDbStaleRuns, RunFromBeforeARebootOfThisHostIsAbandoned) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  RawDb(path).exec("UPDATE runs SET boot_id = 'an-earlier-boot'");
  EXPECT_EQ(db.run(run)->status, "abandoned");
  EXPECT_NE(db.run(run)->error.find("restarted"), std::string::npos) << db.run(run)->error;
}

TEST_F(ResultsDbStaleRuns, RunOfAnotherHostCannotBeCheckedAndStaysRunning) {
  const auto path = file("results.db");
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    db.begin_run(sample_run());
  }
  // The pid of a process that is surely gone, on a host that is not this one (a file from the GPU machine).
  RawDb(path).exec("UPDATE runs SET host = 'gpu-node-7', boot_id = 'its-boot', pid = 2147483000");
  EXPECT_EQ(ResultsDb::open(path, OpenMode::read_only).runs().at(0).status, "running");
  ResultsDb::open(path, OpenMode::read_write);
  EXPECT_EQ(stored_statuses(path), std::vector<std::string>{"running"});
}

TEST_F(ResultsDbStaleRuns, FinishedRunsAreNeverAbandoned) {
  const auto path = file("results.db");
  const pid_t pid = start_run_in_child(path);
  ASSERT_GT(pid, 0);
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    db.finish_run(db.runs().at(0).id, "ok", 5);  // closed by someone before its process died
  }
  ::kill(pid, SIGKILL);
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
  ResultsDb::open(path, OpenMode::read_write);
  EXPECT_EQ(stored_statuses(path), std::vector<std::string>{"ok"});
}

TEST_F(ResultsDbStaleRuns, FailedRunKeepsItsError) {
  auto db = ResultsDb::open(file("results.db"), OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  db.finish_run(run, "failed", 7, "'results.db': add_point: recording point 3 of run 1: database or disk is full");
  EXPECT_EQ(db.run(run)->status, "failed");
  EXPECT_EQ(db.run(run)->finished_unix_ms, 7);
  EXPECT_EQ(db.run(run)->error, "'results.db': add_point: recording point 3 of run 1: database or disk is full");
}

}  // namespace
