// The results database: round trips (profiles included), WAL and concurrent readers, all-or-nothing points,
// a writer killed mid-run. Stale runs, opening and migrating old files, and refusing what is not ours: the other
// test_db_*.cpp files (shared helpers: db_test_util.h).
#include <gtest/gtest.h>

#include "db_test_util.h"

namespace {

using namespace moc::dbtest;

TEST_F(ResultsDbStore, RoundTripKeepsARunWithTwoPointsAndEverythingRecordedAtThem) {
  const auto path = file("results.db");
  const auto run_in = sample_run();
  const std::vector<DeviceRecord> devices_in = {{"cuda", "NVIDIA H100 80GB HBM3", R"({"sm":"9.0","mem_gib":80})"},
                                                {"cpu", "AMD EPYC 9654", R"({"threads":16})"}};
  PointRecord p0 = sample_point(0, 0), p1 = sample_point(0, 1);
  p1.status = "oom";
  p1.error = "out of memory: 80.0 GiB requested";
  std::int64_t run_id = 0;
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    EXPECT_EQ(db.schema_version(), moc::db::kSchemaVersion);
    EXPECT_EQ(db.path(), path);
    run_id = db.begin_run(run_in);
    for (const auto& d : devices_in) db.add_device(run_id, d);
    p0.run_id = p1.run_id = run_id;
    const auto trace = sample_trace();
    p0.id = db.add_point(p0, sample_ranges(), sample_mem(), &trace);
    p1.id = db.add_point(p1, {}, {});
    db.finish_run(run_id, "ok", run_in.started_unix_ms + 4321);
  }

  const auto db = ResultsDb::open(path, OpenMode::read_only);
  auto run_out = run_in;
  run_out.id = run_id;
  run_out.status = "ok";
  run_out.finished_unix_ms = run_in.started_unix_ms + 4321;
  run_out.writer = moc::db::this_process();
  ASSERT_EQ(db.runs().size(), 1u);
  EXPECT_EQ(db.runs()[0], run_out);
  EXPECT_EQ(db.run(run_id), run_out);
  EXPECT_FALSE(db.run(run_id + 1).has_value());
  EXPECT_EQ(db.devices(run_id), devices_in);

  const auto points = db.points(run_id);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0], p0);
  EXPECT_EQ(points[1], p1);
  EXPECT_EQ(points[0].axes[0].first, "seq") << "axes keep the sweep's order";
  EXPECT_EQ(points[0].mode, "decode");
  EXPECT_EQ(points[1].mode, "ffn-train");
  EXPECT_EQ(db.profile(p0.id), sample_trace());
  EXPECT_EQ(db.ranges(p0.id), sample_ranges());
  EXPECT_EQ(db.memory_events(p0.id), sample_mem());
  EXPECT_FALSE(db.profile(p1.id).has_value()) << "a point without a profile";
  EXPECT_FALSE(db.profile(p1.id + 100).has_value()) << "no such point";
  EXPECT_TRUE(db.ranges(p1.id).empty());
  EXPECT_TRUE(db.memory_events(p1.id).empty());
}

TEST(RunEnvironment, TheSwitchesARunRecordedInItsConfigInRecordedOrder) {
  RunRecord r;
  r.config_json = R"({"backend":"cuda","points":4,"env":{"MOCBENCH_SKINNY":"TC:2","MOCBENCH_ATTN":"own"}})";
  EXPECT_EQ(run_environment(r), (std::vector<std::string>{"MOCBENCH_SKINNY=TC:2", "MOCBENCH_ATTN=own"}));
  r.config_json = R"({"backend":"cpu","points":1,"env":{}})";
  EXPECT_TRUE(run_environment(r).empty());
  r.config_json = R"({"backend":"cpu","points":1})";  // recorded before the environment was stored
  EXPECT_TRUE(run_environment(r).empty());
  r.config_json = "{not json";  // opaque to the store: nothing to show, no throw
  EXPECT_TRUE(run_environment(r).empty());
}

TEST_F(ResultsDbStore, RunsAreListedNewestFirst) {
  auto db = ResultsDb::open(file("results.db"), OpenMode::read_write);
  const auto old_run = db.begin_run(sample_run("old", 1000));
  const auto new_run = db.begin_run(sample_run("new", 2000));
  const auto runs = db.runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].id, new_run);
  EXPECT_EQ(runs[1].id, old_run);
  EXPECT_EQ(runs[0].status, "running");
  EXPECT_EQ(runs[0].finished_unix_ms, 0);
}

TEST_F(ResultsDbStore, NanAndInfiniteMetricsRoundTrip) {
  auto db = ResultsDb::open(file("results.db"), OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  auto p = sample_point(run, 0);
  p.metrics = {{"loss", std::numeric_limits<double>::quiet_NaN()},
               {"ratio", std::numeric_limits<double>::infinity()},
               {"neg", -std::numeric_limits<double>::infinity()}};
  db.add_point(p, {}, {});
  const auto m = db.points(run).at(0).metrics;
  ASSERT_EQ(m.size(), 3u);
  EXPECT_TRUE(std::isnan(m[0].second));
  EXPECT_EQ(m[1].second, std::numeric_limits<double>::infinity());
  EXPECT_EQ(m[2].second, -std::numeric_limits<double>::infinity());
}

TEST_F(ResultsDbStore, FileIsInWalModeWithMocbenchsApplicationIdAndSchemaVersion) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  RawDb raw(path);
  EXPECT_EQ(raw.column("PRAGMA journal_mode").at(0), "wal");
  EXPECT_EQ(raw.integer("PRAGMA application_id"), moc::db::kApplicationId);
  EXPECT_EQ(raw.integer("PRAGMA user_version"), moc::db::kSchemaVersion);
}

TEST_F(ResultsDbStore, ReaderSeesCommittedPointsWhileAWriterHoldsTheFileOpen) {
  const auto path = file("results.db");
  auto writer = ResultsDb::open(path, OpenMode::read_write);
  const auto run = writer.begin_run(sample_run());
  const auto trace = sample_trace();
  writer.add_point(sample_point(run, 0), sample_ranges(), sample_mem(), &trace);
  writer.add_point(sample_point(run, 1), sample_ranges(), sample_mem(), &trace);

  const auto reader = ResultsDb::open(path, OpenMode::read_only);
  EXPECT_EQ(reader.run(run)->status, "running");
  EXPECT_EQ(reader.points(run).size(), 2u);

  writer.add_point(sample_point(run, 2), sample_ranges(), sample_mem(), &trace);
  const auto points = reader.points(run);
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(reader.profile(points[2].id), trace);
  writer.finish_run(run, "ok", 1);
  EXPECT_EQ(reader.run(run)->status, "ok");
}

// Row counts of every table, to see that nothing partial was left.
std::vector<std::int64_t> row_counts(const std::string& path) {
  RawDb raw(path);
  std::vector<std::int64_t> n;
  for (const char* t : {"runs", "points", "point_axes", "metrics", "ranges", "memory_events", "devices", "StringIds",
                        "profiles", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                        "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUDA_GPU_MEMORY_USAGE_EVENTS",
                        "NVTX_EVENTS", "ALLOCATOR_EVENTS", "TARGET_INFO_GPU", "point_series"})
    n.push_back(raw.integer(std::string("SELECT count(*) FROM ") + t));
  return n;
}

TEST_F(ResultsDbStore, SeriesRoundTripByNameInOrderAndABadOneLeavesNothing) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<moc::db::SeriesRecord> series = {
      {"val_ppl", {0, 100, 200}, {8192, 310.5, 97.25}},
      {"train_loss", {1, 2, 3, 4}, {9.0, 8.5, nan, 7.75}},
      {"gate_pre_hist.L0", {-1.5, -0.5, 0.5}, {0.25, 0.5, 0.25}},
  };
  const auto id = db.add_point(sample_point(run, 0), {}, {}, nullptr, series);
  const auto back = db.series(id);
  ASSERT_EQ(back.size(), 3u);  // by name
  EXPECT_EQ(back[0].name, "gate_pre_hist.L0");
  EXPECT_EQ(back[0], series[2]);
  EXPECT_EQ(back[1].name, "train_loss");
  EXPECT_EQ(back[1].x, series[1].x);
  EXPECT_TRUE(std::isnan(back[1].y[2]));
  EXPECT_EQ(back[1].y[3], 7.75);
  EXPECT_EQ(back[2], series[0]);
  EXPECT_TRUE(db.series(id + 100).empty());
  // x and y of different lengths: refused, and the point is not half-written.
  const auto before = row_counts(path);
  EXPECT_THROW(db.add_point(sample_point(run, 1), {}, {}, nullptr, {{"bad", {1, 2}, {1}}}), DbError);
  EXPECT_EQ(row_counts(path), before);
  EXPECT_EQ(db.points(run).size(), 1u);
}

TEST_F(ResultsDbStore, AddPointWithADuplicateIndexLeavesNoPartialRows) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto first = sample_point(run, 0);
  const auto trace = sample_trace();
  db.add_point(first, sample_ranges(), sample_mem(), &trace);
  const auto before = row_counts(path);

  auto dup = sample_point(run, 0);
  dup.axes = {{"other", "1"}};
  auto other_trace = sample_trace(5);
  other_trace.kernels[0].name = "a name no point had before";
  try {
    db.add_point(dup, sample_ranges(), sample_mem(), &other_trace);
    FAIL() << "a second point 0 was accepted";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("UNIQUE"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("point 0 of run"), std::string::npos) << e.what();
  }
  EXPECT_EQ(row_counts(path), before);
  auto kept = db.points(run);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(db.profile(kept[0].id), trace);
  kept[0].id = 0;
  EXPECT_EQ(kept[0], first);
  // The connection is usable again: no transaction was left open.
  EXPECT_NO_THROW(db.add_point(sample_point(run, 1), {}, {}));
}

TEST_F(ResultsDbStore, AddPointFailingAfterPartialWritesRollsBackEverything) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto before = row_counts(path);

  // The metrics are written last: the point, its axes, ranges, memory events and profile are in by then.
  auto p = sample_point(run, 0);
  p.metrics.emplace_back("median_us", 13.0);
  const auto trace = sample_trace(50);
  try {
    db.add_point(p, sample_ranges(), sample_mem(), &trace);
    FAIL() << "a duplicated metric was accepted";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("metric 'median_us'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_EQ(row_counts(path), before);
  EXPECT_TRUE(db.points(run).empty());
  p.metrics.pop_back();
  EXPECT_NO_THROW(db.add_point(p, sample_ranges(), sample_mem(), &trace));
  ASSERT_EQ(db.points(run).size(), 1u);
  EXPECT_EQ(db.profile(db.points(run)[0].id), trace);
}

TEST_F(ResultsDbStore, AddPointFailingInsideItsProfileRollsBackEverything) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto before = row_counts(path);

  // Kernels (with new StringIds), memcpys and memsets are in when the second API call fails.
  auto bad_domain = sample_trace(50);
  bad_domain.api[1].domain = "kernel";
  try {
    db.add_point(sample_point(run, 0), sample_ranges(), sample_mem(), &bad_domain);
    FAIL() << "an API call of domain 'kernel' was accepted";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("API call 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CHECK"), std::string::npos) << e.what();
  }
  EXPECT_EQ(row_counts(path), before);

  // Two phase ranges with one id: the second one is refused, and nothing of the point stays.
  auto dup_range = sample_trace(50);
  dup_range.ranges[3].id = dup_range.ranges[1].id;
  try {
    db.add_point(sample_point(run, 0), sample_ranges(), sample_mem(), &dup_range);
    FAIL() << "two ranges with one id were accepted";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("phase range 3"), std::string::npos) << e.what();
  }
  EXPECT_EQ(row_counts(path), before);
  EXPECT_TRUE(db.points(run).empty());
}

TEST_F(ResultsDbStore, StringIdsAreSharedByThePointsOfAFile) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto trace = sample_trace(100);
  const auto a = db.add_point(sample_point(run, 0), {}, {}, &trace);
  {
    auto db2 = ResultsDb::open(path, OpenMode::read_write);  // another connection: nothing cached
    db2.add_point(sample_point(run, 1), {}, {}, &trace);
  }
  const auto b = db.add_point(sample_point(run, 2), {}, {}, &trace);
  // 7 kernel names, 3 more short names (the other 4 kernels are their own short names), 2 API names, 4
  // stage-stamp names (k_step, start, qkv, gate & up; the stage "rmsnorm" is a short name already), 2 declared
  // op names (gemm, ffn_decode.gate).
  RawDb raw(path);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM StringIds"), 7 + 3 + 2 + 4 + 2);
  EXPECT_EQ(raw.integer("SELECT count(DISTINCT value) FROM StringIds"), 7 + 3 + 2 + 4 + 2);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"), 300);
  EXPECT_EQ(db.profile(a), trace);
  EXPECT_EQ(db.profile(b), trace);
}

TEST_F(ResultsDbStore, HundredThousandKernelsRoundTrip) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto trace = sample_trace(100'000);
  const auto id = db.add_point(sample_point(run, 0), sample_ranges(), sample_mem(), &trace);
  const auto back = db.profile(id);
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->kernels.size(), 100'000u);
  EXPECT_TRUE(*back == trace);  // not EXPECT_EQ: a failure would print 100k records
}

TEST_F(ResultsDbStore, ProfileTablesKeepNsightSystemsNamesAndMeanings) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto trace = sample_trace(7);
  const auto id = db.add_point(sample_point(run, 0), {}, {}, &trace);
  RawDb raw(path);
  const std::string of = " WHERE point_id = " + std::to_string(id);
  // nsys-style SQL: names through StringIds, kernels joined to their NVTX range.
  EXPECT_EQ(raw.column("SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName" + of +
                       " ORDER BY k.id LIMIT 1"),
            std::vector<std::string>{"topk_kernel"});
  EXPECT_EQ(raw.column("SELECT n.text FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN NVTX_EVENTS n ON n.point_id = k.point_id "
                       "AND n.rangeId = k.rangeId WHERE k.point_id = " +
                       std::to_string(id) + " ORDER BY k.id LIMIT 3"),
            (std::vector<std::string>{"step", "layer.0", "ffn.topk"}));
  EXPECT_EQ(raw.column("SELECT DISTINCT eventType FROM NVTX_EVENTS" + of), std::vector<std::string>{"59"});
  EXPECT_EQ(raw.integer("SELECT count(*) FROM NVTX_EVENTS" + of +
                        " AND textId IS NULL AND globalTid = 0 AND domainId = 0"),
            4);
  EXPECT_EQ(raw.column("SELECT s.value || ':' || r.domain FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON "
                       "s.id = r.nameId ORDER BY r.id"),
            (std::vector<std::string>{"cudaLaunchKernel:runtime", "cuLaunchKernelEx:driver",
                                      "cudaLaunchKernel:runtime"}));
  EXPECT_EQ(raw.column("SELECT memoryOperationType FROM CUDA_GPU_MEMORY_USAGE_EVENTS ORDER BY id"),
            (std::vector<std::string>{"alloc", "free"}));
  EXPECT_EQ(raw.column("SELECT copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY id"),
            (std::vector<std::string>{"HtoD", "DtoD"}));
  EXPECT_EQ(raw.column("SELECT source || ' ' || steps FROM profiles"), std::vector<std::string>{"cupti 2"});
  // Deleting the point deletes its profile (ON DELETE CASCADE); StringIds stay.
  raw.exec("PRAGMA foreign_keys = ON; DELETE FROM points WHERE id = " + std::to_string(id));
  for (const char* t : {"profiles", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                        "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUDA_GPU_MEMORY_USAGE_EVENTS",
                        "NVTX_EVENTS", "ALLOCATOR_EVENTS"})
    EXPECT_EQ(raw.integer(std::string("SELECT count(*) FROM ") + t), 0) << t;
  EXPECT_GT(raw.integer("SELECT count(*) FROM StringIds"), 0);
}

TEST_F(ResultsDbStore, TargetInfoRoundTrips) {
  const auto path = file("results.db");
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto other = db.begin_run(sample_run("other", 2));
  const GpuInfoRecord g1{1, "NVIDIA H200", 9, 0, 132, 52'428'800, 150'012'000'256, 1'980'000, 3'201'000, 6144};
  const GpuInfoRecord g0{0, "NVIDIA H100 80GB HBM3", 9, 0, 132, 52'428'800, 85'028'896'768, 1'980'000, 2'619'000, 5120};
  db.add_gpu_info(run, g1);  // out of order: read back by ordinal
  db.add_gpu_info(run, g0);
  db.add_gpu_info(other, g0);
  EXPECT_EQ(db.gpu_info(run), (std::vector<GpuInfoRecord>{g0, g1}));
  EXPECT_EQ(db.gpu_info(other), (std::vector<GpuInfoRecord>{g0}));
  // The device ceilings of the roofline, by ordinal (the CPU backend's -1 first).
  const moc::db::CeilingsRecord c0{0, "NVIDIA H100 80GB HBM3", 2990.5, 786.25, "bf16", 1764000000000, "measured"};
  const moc::db::CeilingsRecord cpu{-1, "AMD EPYC", 12.5, 0.1, "f32", 1764000000001, "cache"};
  db.add_ceilings(run, c0);
  db.add_ceilings(run, cpu);
  EXPECT_EQ(db.ceilings(run), (std::vector<moc::db::CeilingsRecord>{cpu, c0}));
  EXPECT_TRUE(db.ceilings(other).empty());
  EXPECT_THROW(db.add_ceilings(run, c0), DbError) << "one row per device and run";
  EXPECT_TRUE(db.gpu_info(other + 1).empty());
  try {
    db.add_gpu_info(run, g0);
    FAIL() << "GPU 0 of the run was recorded twice";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("add_gpu_info"), std::string::npos) << e.what();
  }
  EXPECT_THROW(db.add_gpu_info(other + 1, g0), DbError);  // no such run
  EXPECT_THROW(ResultsDb::open(path, OpenMode::read_only).add_gpu_info(run, g0), DbError);
}

TEST_F(ResultsDbStore, PointOfAnUnknownRunIsRefusedByTheForeignKey) {
  auto db = ResultsDb::open(file("results.db"), OpenMode::read_write);
  try {
    db.add_point(sample_point(42, 0), {}, {});
    FAIL() << "a point of run 42 was accepted";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("FOREIGN KEY"), std::string::npos) << e.what();
  }
  EXPECT_THROW(db.add_device(42, {"cpu", "x", "{}"}), DbError);
}

TEST_F(ResultsDbStore, UnknownStatusesAndRunsAreRefusedWithTheAllowedValues) {
  auto db = ResultsDb::open(file("results.db"), OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  try {
    db.finish_run(run, "done", 1);
    FAIL();
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("ok, interrupted, failed"), std::string::npos) << e.what();
  }
  auto p = sample_point(run, 0);
  p.status = "fine";
  try {
    db.add_point(p, {}, {});
    FAIL();
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("ok, oom, interrupted, failed"), std::string::npos) << e.what();
  }
  try {
    db.finish_run(run + 1, "ok", 1);
    FAIL();
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("no such run"), std::string::npos) << e.what();
  }
  EXPECT_EQ(db.run(run)->status, "running");
}

TEST_F(ResultsDbStore, ReadOnlyHandleRefusesWrites) {
  const auto path = file("results.db");
  ResultsDb::open(path, OpenMode::read_write);
  auto db = ResultsDb::open(path, OpenMode::read_only);
  try {
    db.begin_run(sample_run());
    FAIL();
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("read_write"), std::string::npos) << e.what();
  }
  EXPECT_THROW(db.add_point(sample_point(1, 0), {}, {}), DbError);
  EXPECT_THROW(db.finish_run(1, "ok", 1), DbError);
  EXPECT_THROW(db.add_device(1, {}), DbError);
}

TEST_F(ResultsDbStore, MovedHandleKeepsWorking) {
  auto a = ResultsDb::open(file("results.db"), OpenMode::read_write);
  ResultsDb b = std::move(a);
  const auto run = b.begin_run(sample_run());
  a = std::move(b);
  EXPECT_EQ(a.run(run)->status, "running");
}

// Issue 16: N processes creating the same new file at the same moment all succeed (the WAL switch and the
// schema setup wait for each other instead of failing with "database is locked").
TEST_F(ResultsDbStore, ConcurrentCreatorsOfOneNewFileAllSucceed) {
  constexpr int kProcs = 8;
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const auto path = file("race" + std::to_string(round) + ".db");
    int go[2];
    ASSERT_EQ(::pipe(go), 0);
    std::vector<pid_t> kids;
    for (int k = 0; k < kProcs; ++k) {
      const pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::close(go[1]);
        char c = 0;
        if (::read(go[0], &c, 1) != 0) ::_exit(3);  // released together when the parent closes the pipe
        int code = 0;
        try {
          auto db = ResultsDb::open(path, OpenMode::read_write);
          db.begin_run(sample_run());
        } catch (const std::exception& e) {
          std::fprintf(stderr, "creator %d: %s\n", k, e.what());
          code = 1;
        }
        ::_exit(code);
      }
      kids.push_back(pid);
    }
    ::close(go[0]);
    ::close(go[1]);  // go
    for (pid_t pid : kids) {
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a creator failed (its message is above)";
    }
    const auto db = ResultsDb::open(path, OpenMode::read_only);
    EXPECT_EQ(db.runs().size(), static_cast<std::size_t>(kProcs));
  }
}

TEST_F(ResultsDbStore, WriterKilledMidRunLeavesTheRunReadableWithItsCommittedPoints) {
  const auto path = file("results.db");
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: a run writing points until it is killed; one byte down the pipe per committed point.
    ::close(fds[0]);
    int code = 0;
    try {
      auto db = ResultsDb::open(path, OpenMode::read_write);
      const auto run = db.begin_run(sample_run());
      const auto trace = sample_trace(20);
      for (int i = 0;; ++i) {
        db.add_point(sample_point(run, i), sample_ranges(), sample_mem(), &trace);
        const char byte = 'p';
        if (::write(fds[1], &byte, 1) != 1) break;
      }
    } catch (...) {
      code = 1;
    }
    ::_exit(code);  // never back into the test runner
  }
  ::close(fds[1]);
  int committed = 0;
  char byte = 0;
  while (committed < 3 && ::read(fds[0], &byte, 1) == 1) ++committed;
  ::kill(pid, SIGKILL);  // lands wherever the writer is, most likely inside the next point's transaction
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ::close(fds[0]);
  ASSERT_EQ(committed, 3) << "the writer failed before committing three points";
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the writer ended by itself";

  {
    const auto db = ResultsDb::open(path, OpenMode::read_only);
    const auto runs = db.runs();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].status, "abandoned") << "its process is gone";
    EXPECT_EQ(runs[0].finished_unix_ms, 0);
    const auto points = db.points(runs[0].id);
    ASSERT_GE(points.size(), 3u);
    for (std::size_t i = 0; i < points.size(); ++i) {
      SCOPED_TRACE("point " + std::to_string(i));
      auto expected = sample_point(runs[0].id, static_cast<int>(i));
      expected.id = points[i].id;
      EXPECT_EQ(points[i], expected);
      EXPECT_EQ(db.profile(points[i].id), sample_trace(20));
      EXPECT_EQ(db.ranges(points[i].id), sample_ranges());
      EXPECT_EQ(db.memory_events(points[i].id), sample_mem());
    }
  }
  // A later writer closes the dead run in the file.
  ResultsDb::open(path, OpenMode::read_write);
  EXPECT_EQ(RawDb(path).column("SELECT status FROM runs"), std::vector<std::string>{"abandoned"});
}

}  // namespace
