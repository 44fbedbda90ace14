// What the results database's tests share (test_db*.cpp): raw SQLite access to craft and inspect files, a
// fresh folder per test, and sample runs, points and profiles with every field set.
#pragma once
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "db/results_db.h"

namespace moc::dbtest {

namespace fs = std::filesystem;
using moc::db::DbError;
using moc::db::DeviceRecord;
using moc::db::GpuInfoRecord;
using moc::db::MemEventRecord;
using moc::db::OpenMode;
using moc::db::PointRecord;
using moc::db::RangeRecord;
using moc::db::ResultsDb;
using moc::db::RunRecord;
using moc::prof::ProfileTrace;

inline std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Raw C API access, to craft fixture files (an old schema, another application's file) and to look at
// a file the way a third party would.
class RawDb {
 public:
  explicit RawDb(const fs::path& p) {
    if (sqlite3_open_v2(p.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK)
      throw std::runtime_error("sqlite3_open_v2 " + p.string() + ": " + sqlite3_errmsg(db_));
  }
  ~RawDb() { sqlite3_close(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  void exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      const std::string msg = err != nullptr ? err : "?";
      sqlite3_free(err);
      throw std::runtime_error(msg + " in: " + sql);
    }
  }
  // The first column of every row, as text.
  std::vector<std::string> column(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr) != SQLITE_OK)
      throw std::runtime_error(std::string(sqlite3_errmsg(db_)) + " in: " + sql);
    std::vector<std::string> out;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      const auto* t = sqlite3_column_text(s, 0);
      out.emplace_back(t != nullptr ? reinterpret_cast<const char*>(t) : "");
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) throw std::runtime_error(std::string(sqlite3_errmsg(db_)) + " in: " + sql);
    return out;
  }
  std::int64_t integer(const std::string& sql) { return std::stoll(column(sql).at(0)); }

 private:
  sqlite3* db_ = nullptr;
};

// A fresh folder per test, removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("mocbench_db_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) +
                                        "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

using ResultsDbStore = TempDirTest;
using ResultsDbOpen = TempDirTest;
using ResultsDbMigration = TempDirTest;
using ResultsDbRefusal = TempDirTest;
using ResultsDbStaleRuns = TempDirTest;

inline RunRecord sample_run(const std::string& scenario = "decode_bs1_4", std::int64_t started = 1'700'000'000'000) {
  RunRecord r;
  r.scenario_name = scenario;
  r.scenario_path = "scenarios/" + scenario + ".toml";
  r.scenario_text = "[model]\npreset = \"tiny\"\n# unicode: \xc3\xa9\n";
  r.scenario_hash = "sha256:0123abcd";
  r.config_json = R"({"preset":"tiny","batch":[1,4]})";
  r.overrides_json = R"({"cuda":{"k":0.2}})";
  r.machine_json = R"({"cpu":"EPYC","threads":16})";
  r.device_kind = "cuda";
  r.device_name = "NVIDIA H100 80GB HBM3";
  r.mocbench_version = "v0.1.0-3-gabcdef";
  r.started_unix_ms = started;
  return r;
}

inline PointRecord sample_point(std::int64_t run_id, int index) {
  PointRecord p;
  p.run_id = run_id;
  p.index = index;
  p.mode = index % 2 == 0 ? "decode" : "ffn-train";
  p.status = "ok";
  // Deliberately not alphabetical: the order is the sweep's, and must come back as it went in.
  p.axes = {{"seq", std::to_string(128 * (index + 1))}, {"batch", std::to_string(index + 1)}, {"ffn", "moc"}};
  p.metrics = {{"tokens_per_s", 1000.5 + index}, {"median_us", 12.25}, {"peak_bytes", 3.0e9}};
  return p;
}

// A profile with every field of every record set, none at its default: n kernels over 7 distinct names
// (beyond 32 bits, unsigned ids at their extremes), and one or more of every other record.
inline ProfileTrace sample_trace(int n = 3) {
  ProfileTrace t;
  t.source = "cupti";
  t.steps = 2;
  t.start_ns = 5'000'000'000'000;  // beyond 32 bits on purpose
  t.end_ns = t.start_ns + 1'000'000;
  t.dropped_records = 0xFFFF'FFFF'FFFF'FFF0ull;  // beyond int64: stored as its two's complement
  static const char* const kNames[] = {"void moc::topk_kernel<__nv_bfloat16, 128>(const __nv_bfloat16*, int*)",
                                       "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn",
                                       "void moc::rmsnorm<float>(float*)",
                                       "flash_fwd_kernel",
                                       "void at::native::elementwise_kernel<128, 2>()",
                                       "softmax \xc3\xa9",  // not ASCII
                                       "cpu: matmul"};
  static const char* const kShort[] = {"topk_kernel", "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn",
                                       "rmsnorm", "flash_fwd_kernel", "elementwise_kernel", "softmax \xc3\xa9",
                                       "cpu: matmul"};
  for (int i = 0; i < n; ++i) {
    moc::prof::KernelRecord k;
    k.name = kNames[i % 7];
    k.short_name = kShort[i % 7];
    k.start_ns = t.start_ns + 1000 * i;
    k.end_ns = k.start_ns + 750 + i % 13;
    k.device_id = i % 7 == 6 ? -1 : i % 2;
    k.context_id = 1 + i % 3;
    k.stream_id = 7 + i % 2;
    k.correlation_id = 0xFFFF'FF00u + static_cast<std::uint32_t>(i % 200);
    k.grid_x = 132 + i % 5, k.grid_y = 2, k.grid_z = 3, k.block_x = 256, k.block_y = 4, k.block_z = 5;
    k.registers_per_thread = 96, k.static_shared_bytes = 1024, k.dynamic_shared_bytes = 49152 + i % 3;
    k.graph_id = i % 4 == 0 ? 0 : 0xFFFF'FFFEu;
    k.graph_node_id = i % 4 == 0 ? 0 : 0x8000'0000'0000'0001ull + static_cast<std::uint64_t>(i);
    k.range_id = i % 5 == 4 ? -1 : i % 3;
    k.step = i % 2;
    if (i % 3 != 2) {  // declared costs (the roofline); every third kernel undeclared
      k.op = i % 2 ? "gemm" : "ffn_decode.gate";
      k.op_bytes = 1'000'000'000'000LL + i;  // beyond 32 bits
      k.op_flops = 2LL * i;
      k.op_call = i / 2;
      k.op_bound = i % 4 == 1;
    }
    t.kernels.push_back(k);
  }
  t.memcpys.push_back({t.start_ns + 10, t.start_ns + 90, 0, 1, 7, 0xFFFF'FFFFu, 1 << 20, "HtoD", "pinned", "device",
                       3, 0xFFFF'FFFF'FFFF'FFFFull, 0, 0});
  t.memcpys.push_back({t.start_ns + 100, t.start_ns + 190, 1, 2, 8, 17, 4096, "DtoD", "device", "device", 0, 0, -1, 1});
  t.memsets.push_back({t.start_ns + 200, t.start_ns + 210, 0, 1, 7, 18, 8192, 255, "device", 4, 99, 1, 1});
  t.api.push_back({"cudaLaunchKernel", "runtime", t.start_ns - 50, t.start_ns - 20, 0xFFFF'FF00u, 4242, 0});
  t.api.push_back({"cuLaunchKernelEx", "driver", t.start_ns - 10, t.start_ns - 5, 0xFFFF'FF01u, 4242, 700});
  t.api.push_back({"cudaLaunchKernel", "runtime", t.start_ns + 5, t.start_ns + 9, 19, 4243, 0});
  t.device_memory.push_back({t.start_ns + 1, 0, 1, 7, 20, 0x7F00'0000'0000ull, 1 << 30, true, "device"});
  t.device_memory.push_back({t.start_ns + 2, 1, 2, 0, 21, 0xFFFF'0000'0000'0000ull, 1 << 30, false, "managed"});
  // Ranges: a root, a child, a grandchild, and a graph replay (host times 0).
  t.ranges.push_back({0, -1, "step", 0, 0, t.start_ns, t.end_ns, t.start_ns - 100, t.end_ns + 100, n + 3});
  t.ranges.push_back({1, 0, "layer.0", 1, 0, t.start_ns + 10, t.start_ns + 500, t.start_ns, t.start_ns + 400, n});
  t.ranges.push_back({2, 1, "ffn.topk", 2, 1, t.start_ns + 20, t.start_ns + 30, t.start_ns + 15, t.start_ns + 25, 1});
  t.ranges.push_back({7, 1, "ffn.topk", 2, 1, t.start_ns + 40, t.start_ns + 50, 0, 0, 2});
  t.allocator.push_back({t.start_ns, "activations", "ffn", 0, 0, 4096});
  t.allocator.push_back({t.start_ns + 3, "workspace", "none", -1, 1 << 20, (1 << 20) + 8});
  t.allocator.push_back({t.start_ns + 4, "activations", "ffn", 0, -4096, 0});
  // Stage stamps of one launch of a multi-stage kernel, as older databases hold the retired persistent decode
  // step's k_step (names shared with the kernel names' StringIds on purpose).
  t.stages.push_back({0, "k_step", 0, 0, -1, "start", t.start_ns + 100, t.start_ns + 150, 7});
  t.stages.push_back({0, "k_step", 0, 0, 0, "qkv", t.start_ns + 150, t.start_ns + 400, 0});
  t.stages.push_back({1, "k_step", 1, -1, 23, "gate & up", t.start_ns + 400, t.start_ns + 401, 1'000'000'000'000});
  t.stages.push_back({1, "k_step", 1, -1, -1, "rmsnorm", t.start_ns + 401, t.start_ns + 500, 0});
  t.dropped_stamps = 3;
  return t;
}

inline std::vector<RangeRecord> sample_ranges() {
  return {{"step", 100, 900, 0}, {"layer.0", 120, 500, 1}, {"ffn.topk", 130, 200, 2}};
}

inline std::vector<MemEventRecord> sample_mem() {
  return {{10, "activations", "ffn", 0, 4096}, {20, "workspace", "none", -1, 1 << 20}, {30, "activations", "ffn", 0, -4096}};
}

// Opening in either mode must fail with a message containing `expected`, leaving the file byte-identical.
inline void expect_refused(const std::string& path, const std::string& expected) {
  const std::string before = read_bytes(path);
  for (const auto mode : {OpenMode::read_only, OpenMode::read_write}) {
    SCOPED_TRACE(mode == OpenMode::read_only ? "read_only" : "read_write");
    try {
      ResultsDb::open(path, mode);
      ADD_FAILURE() << "opened " << path;
    } catch (const DbError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << "the message names the file: " << e.what();
    }
    EXPECT_EQ(read_bytes(path), before) << "a refused open changed the file";
  }
}

// "table.column" of every table and "index:name" of every index: the shape of a schema.
inline std::vector<std::string> schema_shape(const std::string& path) {
  RawDb raw(path);
  auto shape = raw.column(
      "SELECT m.name || '.' || c.name FROM sqlite_master m JOIN pragma_table_info(m.name) c "
      "WHERE m.type = 'table' ORDER BY m.name, c.cid");
  for (auto& i : raw.column("SELECT 'index:' || name FROM sqlite_master WHERE type = 'index' ORDER BY name"))
    shape.push_back(i);
  return shape;
}

}  // namespace moc::dbtest
