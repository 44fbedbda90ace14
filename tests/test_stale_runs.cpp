// Stale runs through the real executable (issue 16): a `mocbench run` killed by SIGKILL is listed as
// abandoned, and the next run marks it so in the file; a run that stops on a database error (the disk is
// full) is closed as failed with the error, which is still reported. The store's own tests of the same
// behaviour are ResultsDbStaleRuns in test_db_stale_runs.cpp.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "cli_test_util.h"
#include "db/results_db.h"
#include "shell_util.h"

#ifdef MOCBENCH_BIN
namespace moc {
namespace {
using namespace clitest;  // mocbench(), wait_for_committed_points()

class StaleRunsCli : public moc::test::ScratchDirTest {
 protected:
  // Tiny FFN-training points; `time_bound_s` sets how long each one measures.
  std::string scenario(double time_bound_s, int points) const {
    std::string batches;
    for (int b = 1; b <= points; ++b) batches += (b > 1 ? ", " : "") + std::to_string(b);
    const std::string file = path("s.toml");
    std::ofstream(file) << "name = \"stale\"\ndevice = \"cpu\"\n[model]\npreset = \"tiny\"\n[measure]\nwarmup = 0\n"
                        << "min_reps = 2\nmax_reps = 1000000\ntime_bound_s = " << time_bound_s
                        << "\ntarget_noise = 1e-9\n[axes]\nmode = [\"ffn-train\"]\nbatch = [" << batches
                        << "]\nseq = [8]\n";
    return file;
  }
};

void exec_sql(const std::string& db_path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  const std::string msg = err != nullptr ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << msg;
}

TEST_F(StaleRunsCli, RunKilledBySigkillIsListedAbandonedAndTheNextRunMarksIt) {
  const std::string sc = scenario(1.0, 20), db = path("k.db");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, STDOUT_FILENO);
    execl(MOCBENCH_BIN, MOCBENCH_BIN, "run", sc.c_str(), "--db", db.c_str(), "--quiet", "--no-profile",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until a point is committed (the run is under way), then kill it as the OOM killer would.
  const std::size_t committed = wait_for_committed_points(db, 1, std::chrono::milliseconds(100));
  kill(pid, SIGKILL);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_GE(committed, 1u) << "the run never committed a point";
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "the run ended by itself";

  const auto list = mocbench("list --db " + db);
  ASSERT_EQ(list.code, 0) << list.out;
  EXPECT_NE(list.out.find("abandoned"), std::string::npos) << list.out;
  EXPECT_EQ(list.out.find("running"), std::string::npos) << list.out;
  const auto show = mocbench("show 1 --db " + db);
  EXPECT_NE(show.out.find("abandoned"), std::string::npos) << show.out;

  // The next run (a writer) records it in the file.
  const auto next = mocbench("run " + scenario(0.01, 1) + " --db " + db + " --quiet --no-profile");
  ASSERT_EQ(next.code, 0) << next.out;
  auto store = db::ResultsDb::open(db, db::OpenMode::read_only);
  const auto run = store.run(1);
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->status, "abandoned");
  EXPECT_GT(run->finished_unix_ms, 0) << "the writer stored when it found the run abandoned";
  EXPECT_NE(run->error.find("process " + std::to_string(pid)), std::string::npos) << run->error;
  EXPECT_EQ(store.run(2)->status, "ok");
}

TEST_F(StaleRunsCli, RunStoppedByADatabaseErrorIsMarkedFailedAndTheErrorReported) {
  const std::string db = path("full.db");
  { db::ResultsDb::open(db, db::OpenMode::read_write); }
  // The second point's write fails as on a full disk; the runs table can still be written.
  exec_sql(db,
           "CREATE TRIGGER disk_full BEFORE INSERT ON points WHEN NEW.sweep_index = 1 "
           "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;");
  const auto r = mocbench("run " + scenario(0.01, 3) + " --db " + db + " --quiet --no-profile");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("database or disk is full"), std::string::npos) << "the error is reported: " << r.out;
  auto store = db::ResultsDb::open(db, db::OpenMode::read_only);
  const auto run = store.run(1);
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->status, "failed");
  EXPECT_GT(run->finished_unix_ms, 0);
  EXPECT_NE(run->error.find("database or disk is full"), std::string::npos) << run->error;
  EXPECT_EQ(store.points(1).size(), 1u) << "the point committed before the failure stays";
}

}  // namespace
}  // namespace moc
#endif  // MOCBENCH_BIN
