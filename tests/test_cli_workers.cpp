// Data-parallel points through the real executable: worker processes store every rank, die with their launcher
// (the next launch removes their scratch), run the scenario text the launcher read; launch mistakes are refused
// before any work.
#include <gtest/gtest.h>

#include "cli_test_util.h"

#ifdef MOCBENCH_BIN
namespace moc {
namespace {

using namespace clitest;

// Issue 15: `gpus = N` starts N worker processes of mocbench itself, which meet through the launch contract
// (environment variables) and, on the CPU backend, shared memory; rank 0 stores the point with every rank's
// metrics and the runner copies it into the database. Ends in CI what NCCL does on GPU machines.
const char* kDataParallelScenario = R"(name = "dp"
mode = "train"
device = "cpu"
[model]
preset = "tiny"
[measure]
warmup = 1
min_reps = 3
max_reps = 4
[axes]
ffn = ["dense", "moc"]
zero1 = [false, true]
gpus = [1, 2]
[[exclude]]
gpus = 1
zero1 = true
)";

TEST_F(Cli, DataParallelPointsRunAsWorkerProcessesAndStoreEveryRank) {
  const std::string sc = write("dp.toml", kDataParallelScenario);
  const std::string db = path("dp.db");
  auto r = mocbench("run " + sc + " --db " + db);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("6 ok, 0 oom, 0 failed of 6 points"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("scaling (%)"), std::string::npos) << "the summary shows the multi-GPU columns\n" << r.out;
  auto store = db::ResultsDb::open(db, db::OpenMode::read_only);
  const auto pts = store.points(1);
  ASSERT_EQ(pts.size(), 6u);
  auto metric = [](const db::PointRecord& p, const std::string& name) {
    for (const auto& [k, v] : p.metrics)
      if (k == name) return v;
    return -1.0;
  };
  auto axis = [](const db::PointRecord& p, const std::string& name) {
    for (const auto& [k, v] : p.axes)
      if (k == name) return v;
    return std::string();
  };
  for (const auto& p : pts) {
    SCOPED_TRACE(p.index);
    EXPECT_EQ(p.status, "ok") << p.error;
    if (axis(p, "gpus") == "1") {
      EXPECT_EQ(metric(p, "ranks"), -1.0);
      continue;
    }
    EXPECT_EQ(metric(p, "ranks"), 2.0);
    EXPECT_EQ(metric(p, "rank0_loss_last"), metric(p, "rank1_loss_last")) << "both ranks report the mean loss";
    EXPECT_NEAR(metric(p, "tokens_per_s"), metric(p, "rank0_tokens_per_s") + metric(p, "rank1_tokens_per_s"), 1e-6 * metric(p, "tokens_per_s"));
    EXPECT_GT(metric(p, "scaling_efficiency_pct"), 0.0) << "against the gpus = 1 point before it";
    EXPECT_GT(metric(p, "comm_bytes_per_step"), 0.0);
    EXPECT_GE(metric(p, "comm_ms"), 0.0);
    EXPECT_FALSE(store.ranges(p.id).empty()) << "rank 0's phase ranges come along";
    EXPECT_FALSE(store.memory_events(p.id).empty()) << "and its memory timeline";
    const double opt0 = metric(p, "rank0_peak_optimizer_state_bytes"), opt1 = metric(p, "rank1_peak_optimizer_state_bytes");
    if (axis(p, "zero1") == "true") {
      // Each rank holds about half of the AdamW state; the gpus = 1 twin holds all of it.
      double single = 0;
      for (const auto& q : pts)
        if (axis(q, "gpus") == "1" && axis(q, "ffn") == axis(p, "ffn")) single = metric(q, "peak_optimizer_state_bytes");
      EXPECT_NEAR(opt0 + opt1, single, 0.01 * single);
      EXPECT_LT(opt0, 0.6 * single);
    } else {
      EXPECT_EQ(opt0, opt1);
    }
  }
  // The same point with --gpus from the command line; a worker that fails (here: OOM under a tiny memory
  // limit) ends the others, and the point is stored with its rank's message while the sweep goes on.
  std::string big = kDataParallelScenario;
  big.replace(big.find("[axes]\n"), 7, "[axes]\nbatch = [64]\nseq = [128]\n");
  const std::string sc_big = write("dp_big.toml", big);
  auto oom = mocbench("run " + sc_big + " --db " + db + " --only ffn=dense --only zero1=false --cpu-memory-limit-mib 1");
  EXPECT_EQ(oom.code, 0) << oom.out;
  const auto o = store.points(2);
  ASSERT_EQ(o.size(), 2u);
  for (const auto& p : o) {
    EXPECT_EQ(p.status, "oom") << p.error;
  }
  EXPECT_NE(o[1].error.find("rank "), std::string::npos) << o[1].error;
}

// Issue 27: workers outlived a killed launcher, and every killed launch left its scratch directory (16 MiB of
// shared memory for the CPU ranks) in the temp folder. Workers now die with their launcher, and the next
// launch removes the directories of launchers that are gone.
TEST_F(Cli, WorkersDieWithTheirLauncherAndTheNextLaunchRemovesItsScratch) {
  const std::string sc = write("dp_slow.toml", R"(name = "dp_slow"
mode = "train"
device = "cpu"
[model]
preset = "tiny"
[measure]
warmup = 0
min_reps = 2
max_reps = 1000000
time_bound_s = 60.0
target_noise = 1e-9
[axes]
gpus = [2]
)");
  const std::string db = path("k.db");
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    const int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, STDOUT_FILENO);
    dup2(devnull, STDERR_FILENO);
    execl(MOCBENCH_BIN, MOCBENCH_BIN, "run", sc.c_str(), "--db", db.c_str(), "--quiet", "--no-profile",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  // The launcher's children: its two workers.
  auto children_of = [](pid_t parent) {
    std::vector<pid_t> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      const std::string name = e.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream f(e.path() / "stat");
      std::string line;
      if (!std::getline(f, line)) continue;
      std::istringstream rest(line.substr(line.rfind(')') + 1));
      char state = 0;
      pid_t ppid = 0;
      rest >> state >> ppid;
      if (ppid == parent) out.push_back(static_cast<pid_t>(std::stol(name)));
    }
    return out;
  };
  std::vector<pid_t> workers;
  for (int i = 0; i < 600 && workers.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    workers = children_of(launcher);
  }
  ASSERT_EQ(workers.size(), 2u) << "the launcher started its workers";
  // Its scratch directory, named by the launcher file in it.
  fs::path scratch;
  for (const auto& e : fs::directory_iterator(fs::temp_directory_path())) {
    std::ifstream f(e.path() / "launcher");
    std::string host, boot, ns;
    long long pid = 0;
    if (std::getline(f, host) && std::getline(f, boot) && std::getline(f, ns) && (f >> pid) && pid == launcher)
      scratch = e.path();
  }
  ASSERT_FALSE(scratch.empty()) << "the point directory names its launcher";
  ::kill(launcher, SIGKILL);
  ASSERT_EQ(waitpid(launcher, nullptr, 0), launcher);
  // Gone (or a zombie waiting for a reaper) within 10 s.
  auto dead = [](pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(f, line)) return true;
    const char state = line.substr(line.rfind(')') + 2, 1)[0];
    return state == 'Z' || state == 'X';
  };
  bool all_dead = false;
  for (int i = 0; i < 200 && !all_dead; ++i) {
    all_dead = dead(workers[0]) && dead(workers[1]);
    if (!all_dead) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(all_dead) << "the workers outlived their launcher";
  // A SIGKILLed launcher cannot clean up itself: the next multi-rank launch removes its folder (a launch of a
  // test running beside this one may already have).
  std::string quick = kDataParallelScenario;
  quick.replace(quick.find("[axes]\n"), 7, "[axes]\nbatch = [1]\n");
  const std::string sc_quick = write("dp_quick.toml", quick);
  auto r = mocbench("run " + sc_quick + " --db " + path("q.db") + " --only ffn=dense --only zero1=false --only gpus=2 --no-profile");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(fs::exists(scratch)) << scratch;
}

// Issue 27: workers re-read the scenario by its path, so a scenario edited during the sweep was measured as
// the new text and stored under the old one, and a scenario given as `<(...)` failed its multi-rank points.
// Workers now run the text the launcher read.
TEST_F(Cli, WorkersRunTheScenarioTextTheLauncherRead) {
  const std::string sc = write("dp.toml", kDataParallelScenario);
  const std::string cmd = "bash -c \"'" + std::string(MOCBENCH_BIN) + "' run <(cat '" + sc + "') --db '" +
                          path("p.db") + "' --only ffn=dense --only zero1=false --only gpus=2 --no-profile\"";
  const auto r = moc::test::shell(cmd);
  EXPECT_EQ(r.code, 0) << r.out;
  auto store = db::ResultsDb::open(path("p.db"), db::OpenMode::read_only);
  const auto pts = store.points(1);
  ASSERT_EQ(pts.size(), 1u);
  EXPECT_EQ(pts[0].status, "ok") << pts[0].error;
}

TEST_F(Cli, LaunchContractMistakesAreRefusedBeforeAnyWork) {
  const std::string sc = write("dp.toml", kDataParallelScenario);
  const std::string db = path("c.db");
  // A rank without its world size.
  auto r = mocbench_env("MOCBENCH_RANK=0", "run " + sc + " --db " + db);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("MOCBENCH_WORLD_SIZE is missing"), std::string::npos) << r.out;
  // A launch of 2 ranks with points that are not gpus = 2.
  r = mocbench_env("MOCBENCH_RANK=0 MOCBENCH_WORLD_SIZE=2 MOCBENCH_LOCAL_RANK=0 MOCBENCH_NCCL_ID_FILE=" + path("id"),
                   "run " + sc + " --db " + db);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("every point must train with gpus = 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--only gpus=2"), std::string::npos) << r.out;
  // --gpus on text training ([data]), which is single-GPU.
  r = mocbench("run " + std::string(MOCBENCH_SOURCE_DIR) + "/scenarios/quality_small.toml --device cpu --gpus 2 --db " + db);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("trains on [data] text, which runs on one GPU"), std::string::npos) << r.out;
  // Outside mocbench's launcher the CPU backend has no shared memory to meet in.
  r = mocbench_env("MOCBENCH_RANK=0 MOCBENCH_WORLD_SIZE=2 MOCBENCH_LOCAL_RANK=0 MOCBENCH_NCCL_ID_FILE=" + path("id"),
                   "run " + sc + " --db " + db + " --only gpus=2 --only zero1=false --only ffn=dense");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("mocbench's own launcher"), std::string::npos) << r.out << r.out;
  EXPECT_FALSE(fs::exists(db) && db::ResultsDb::open(db, db::OpenMode::read_only).points(1).size() > 0 &&
               db::ResultsDb::open(db, db::OpenMode::read_only).points(1)[0].status == "ok");
}

}  // namespace
}  // namespace moc
#endif
