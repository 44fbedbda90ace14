// Profile storage speed: one point whose profile has N synthetic kernels (50 distinct names), one API call
// per kernel and a phase range per 20 kernels, written with ResultsDb::add_point (one transaction) and read
// back with ResultsDb::profile. Prints records per second for both (bench/RESULTS.md, "Profile storage").
//
//   mocbench_db_bench [--kernels-only] [kernels (default 1000000)] [file (default: a temporary file, removed
//   afterwards)]        --kernels-only: no API calls or ranges, the kernels alone
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "db/results_db.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::uintmax_t size_or_zero(const std::filesystem::path& p) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(p, ec);
  return ec ? 0 : n;
}

moc::prof::ProfileTrace synthetic_trace(std::size_t n, bool kernels_only) {
  moc::prof::ProfileTrace t;
  t.source = "cupti";
  t.steps = 4;
  t.start_ns = 1'000'000'000'000;
  constexpr int kNames = 50;
  std::vector<std::string> names, short_names;
  for (int i = 0; i < kNames; ++i) {
    short_names.push_back("moc_kernel_" + std::to_string(i));
    names.push_back("void moc::cuda::" + short_names.back() + "<__nv_bfloat16, " + std::to_string(64 << (i % 4)) +
                    ", true>(const __nv_bfloat16*, __nv_bfloat16*, int, int, float)");
  }
  const std::size_t n_ranges = n / 20 + 1;
  t.kernels.reserve(n);
  t.api.reserve(n);
  t.ranges.reserve(n_ranges);
  std::int64_t now = t.start_ns;
  for (std::size_t i = 0; i < n; ++i) {
    const int name = static_cast<int>((i * 7 + i / 13) % kNames);
    const auto corr = static_cast<std::uint32_t>(i + 1);
    if (!kernels_only) t.api.push_back({"cudaLaunchKernel", "runtime", now, now + 2'000, corr, 4242, 0});
    moc::prof::KernelRecord k;
    k.name = names[static_cast<std::size_t>(name)];
    k.short_name = short_names[static_cast<std::size_t>(name)];
    k.start_ns = now + 5'000;
    k.end_ns = k.start_ns + 3'000 + static_cast<std::int64_t>(i % 1000);
    k.device_id = 0;
    k.context_id = 1;
    k.stream_id = 7;
    k.correlation_id = corr;
    k.grid_x = 132, k.grid_y = 1 + name % 3, k.grid_z = 1, k.block_x = 256, k.block_y = 1, k.block_z = 1;
    k.registers_per_thread = 64 + name, k.static_shared_bytes = 1024, k.dynamic_shared_bytes = 49152;
    k.range_id = static_cast<std::int64_t>(i / 20);
    k.step = static_cast<int>(i * 4 / n);
    t.kernels.push_back(std::move(k));
    now += 4'000;
  }
  for (std::size_t r = 0; r < (kernels_only ? 0 : n_ranges); ++r) {
    const auto first = std::min(r * 20, n == 0 ? 0 : n - 1);
    const auto last = std::min(r * 20 + 19, n == 0 ? 0 : n - 1);
    const std::int64_t s = n == 0 ? t.start_ns : t.kernels[first].start_ns;
    const std::int64_t e = n == 0 ? t.start_ns : t.kernels[last].end_ns;
    t.ranges.push_back({static_cast<std::int64_t>(r), -1, "layer." + std::to_string(r % 24), 0,
                        static_cast<int>(r * 20 * 4 / (n + 1)), s, e, s - 5'000, e - 5'000, 20});
  }
  t.end_ns = now + 10'000;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    const bool kernels_only = !args.empty() && args[0] == "--kernels-only";
    if (kernels_only) args.erase(args.begin());
    const std::size_t n = !args.empty() ? std::stoul(args[0]) : 1'000'000;
    namespace fs = std::filesystem;
    const bool temporary = args.size() < 2;
    const std::string path =
        temporary ? (fs::temp_directory_path() / "mocbench_db_bench.db").string() : args[1];
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path + suffix);

    const auto trace = synthetic_trace(n, kernels_only);
    const std::size_t records = trace.kernels.size() + trace.api.size() + trace.ranges.size();
    std::printf("profile: %zu kernels (50 names), %zu API calls, %zu ranges = %zu records\n", trace.kernels.size(),
                trace.api.size(), trace.ranges.size(), records);

    std::int64_t point = 0;
    double write_s = 0;
    {
      auto db = moc::db::ResultsDb::open(path, moc::db::OpenMode::read_write);
      moc::db::RunRecord run;
      run.scenario_name = "db_insert_bench";
      const auto run_id = db.begin_run(run);
      moc::db::PointRecord p;
      p.run_id = run_id;
      p.mode = "decode";
      p.status = "ok";
      const auto t0 = Clock::now();
      point = db.add_point(p, {}, {}, &trace);
      write_s = seconds_since(t0);
      db.finish_run(run_id, "ok", 1);
    }
    const auto db = moc::db::ResultsDb::open(path, moc::db::OpenMode::read_only);
    const auto t0 = Clock::now();
    const auto back = db.profile(point);
    const double read_s = seconds_since(t0);
    if (!back || *back != trace) {
      std::fprintf(stderr, "the profile read back differs from the one written\n");
      return 1;
    }
    const auto bytes = size_or_zero(path) + size_or_zero(path + "-wal");
    std::printf("write (add_point, one transaction): %.3f s  %.0f records/s  (%.0f kernels/s)\n", write_s,
                static_cast<double>(records) / write_s, static_cast<double>(trace.kernels.size()) / write_s);
    std::printf("read  (profile, one snapshot):      %.3f s  %.0f records/s  (%.0f kernels/s)\n", read_s,
                static_cast<double>(records) / read_s, static_cast<double>(trace.kernels.size()) / read_s);
    std::printf("file: %.1f MiB (%.1f bytes/record)\n", static_cast<double>(bytes) / (1 << 20),
                static_cast<double>(bytes) / static_cast<double>(records));
    if (temporary)
      for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path + suffix);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mocbench_db_bench: %s\n", e.what());
    return 1;
  }
}
