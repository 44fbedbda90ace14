// NCCL on the GPU (issue 15, part): a one-rank communicator leaves values as they are, and training with
// it equals training without, bit for bit. The two-rank checks (the all-reduce against a single-process
// sum, two ranks on halves against one on the whole batch) need the 2-GPU machine; on the CPU the same
// semantics are checked with LocalCommunicator (test_dist.cpp).
#include <gtest/gtest.h>

#include "gpu_util.h"
#include "kernels/cuda/nccl.h"
#include "model/trainer.h"
#include "test_util.h"

#ifdef MOCBENCH_HAVE_CUDA
namespace moc {
namespace {

TEST(GpuNccl, OneRankCommunicatorKeepsValuesAndTraining) {
  MOC_GPU_OR_SKIP(gpu);
  if (!cuda::nccl_available()) GTEST_SKIP() << "this build has no NCCL";
  const auto comm = cuda::make_nccl_communicator(*gpu, cuda::nccl_unique_id(), 0, 1);
  EXPECT_EQ(comm->world(), 1);
  std::mt19937 rng(test::fresh_seed());
  Tensor a = test::random_tensor(*gpu, rng, {37, 5}), b = test::random_tensor(*gpu, rng, {3, 129}, 1.0f, DType::bf16);
  const auto a0 = gpu->download_f32(a), b0 = gpu->download_f32(b);
  comm->all_reduce_mean({&a, &b});
  EXPECT_EQ(gpu->download_f32(a), a0);
  EXPECT_EQ(gpu->download_f32(b), b0);
  EXPECT_EQ(comm->mean(3.25), 3.25);

  ModelConfig cfg = preset("tiny");
  apply_override(cfg, "ffn", "moc");
  cfg.param_dtype = cfg.act_dtype = DType::bf16;
  const int B = 2, S = 16;
  const auto ids = test::random_ids(rng, static_cast<std::size_t>(B * S + 1), cfg.vocab);
  Tensor tok = gpu->empty({B * S}, DType::i32, workspace_tag()), tgt = gpu->empty({B * S}, DType::i32, workspace_tag());
  gpu->upload_i32(tok, std::vector<std::int32_t>(ids.begin(), ids.end() - 1));
  gpu->upload_i32(tgt, std::vector<std::int32_t>(ids.begin() + 1, ids.end()));
  // Every way a step communicates -- buckets on the second stream during backward, all after backward,
  // ZeRO-1's reduce to the owner and broadcast back -- is the identity with one rank: training equals
  // training without a communicator, bit for bit, and the events time something.
  struct Way {
    const char* name;
    bool overlap, zero1;
  };
  for (const Way w : {Way{"buckets", true, false}, Way{"after-backward", false, false}, Way{"zero1", true, true}}) {
    SCOPED_TRACE(w.name);
    TrainConfig tc;
    tc.fp32_master = true;
    tc.overlap = w.overlap;
    tc.zero1 = w.zero1;
    tc.bucket_bytes = 4096;  // the tiny model's ~60 KB of gradients in many buckets
    Transformer m1(*gpu, cfg), m2(*gpu, cfg);
    Trainer t1(m1, tc), t2(m2, tc, comm.get());
    EXPECT_GT(t2.buckets(), 3u);
    for (int i = 0; i < 3; ++i) {
      const StepResult r1 = t1.step(tok, tgt, B, S), r2 = t2.step(tok, tgt, B, S);
      EXPECT_EQ(r1.loss, r2.loss) << "step " << i;
      EXPECT_EQ(r1.grad_norm, r2.grad_norm) << "step " << i;
      EXPECT_GT(r2.comm.busy_ms, 0.0);
      EXPECT_GE(r2.comm.exposed_ms, 0.0);
      EXPECT_EQ(r2.comm.calls, static_cast<int>(t2.buckets()));
    }
    for (std::size_t i = 0; i < m1.params().size(); ++i)
      EXPECT_EQ(gpu->download_f32(m1.params()[i].value), gpu->download_f32(m2.params()[i].value)) << m1.params()[i].name;
  }
  Tensor c = test::random_tensor(*gpu, rng, {1000});
  const auto c0 = gpu->download_f32(c);
  comm->broadcast({{&c, 0}});
  EXPECT_EQ(gpu->download_f32(c), c0);
  EXPECT_EQ(comm->all_gather({1.5, -2.0}), (std::vector<double>{1.5, -2.0}));
}

}  // namespace
}  // namespace moc
#endif

// Two processes, one rank each (issue 15's GPU tests). The test spawns this test binary twice with the
// launch contract in the environment; each child runs GpuNcclRank.Worker, writes what it computed, and the
// parent checks: the all-reduce (and reduce, broadcast, all-gather) against the single-process sum, exactly
// (the inputs are small integers times powers of two, so every sum is exact); two ranks on halves of a fixed
// batch against one GPU on the whole batch (the same loss curve within bf16 tolerance), with gradients in
// buckets overlapping backward, all after backward, and ZeRO-1 (= unsharded AdamW). It needs two GPUs, or
// an NCCL that accepts two ranks on one GPU; otherwise it skips saying which.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "app/harness/dist_launch.h"
#include "kernels/cuda/cuda_info.h"

extern char** environ;

#ifdef MOCBENCH_HAVE_CUDA
namespace moc {
namespace {

constexpr int kB = 4, kS = 32, kSteps = 6;

ModelConfig dp_model() {
  ModelConfig cfg = preset("tiny");
  apply_override(cfg, "ffn", "moc");
  cfg.param_dtype = cfg.act_dtype = DType::bf16;
  return cfg;
}

std::vector<std::int32_t> dp_ids(int vocab) {
  std::mt19937 rng(20261125);
  return test::random_ids(rng, static_cast<std::size_t>(kB * kS + 1), vocab);
}

// A rank's exact-sum input: integers in [-64, 64] times 2^-3 (bf16 and f32 hold them and their means exactly).
std::vector<float> exact_values(int rank, std::size_t n) {
  std::mt19937 rng(static_cast<std::uint32_t>(77 + rank));
  std::uniform_int_distribution<int> d(-64, 64);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(d(rng)) * 0.125f;
  return v;
}

struct Variant {
  const char* name;
  bool overlap, zero1;
};
constexpr Variant kVariants[] = {{"buckets", true, false}, {"after-backward", false, false}, {"zero1", true, true}};

std::vector<double> train_losses(Ops& ops, int rows_from, int rows, Communicator* comm, const Variant& v) {
  const ModelConfig cfg = dp_model();
  const auto ids = dp_ids(cfg.vocab);
  const auto off = static_cast<std::ptrdiff_t>(rows_from * kS);
  const std::vector<std::int32_t> tok(ids.begin() + off, ids.begin() + off + rows * kS),
      tgt(ids.begin() + off + 1, ids.begin() + off + rows * kS + 1);
  Tensor x = ops.empty({rows * kS}, DType::i32, workspace_tag()), y = ops.empty({rows * kS}, DType::i32, workspace_tag());
  ops.upload_i32(x, tok);
  ops.upload_i32(y, tgt);
  Transformer m(ops, cfg);
  TrainConfig tc;
  tc.fp32_master = true;
  tc.warmup_steps = 2;
  tc.total_steps = kSteps;
  tc.overlap = v.overlap;
  tc.zero1 = v.zero1;
  tc.bucket_bytes = 4096;  // several buckets even for the tiny model
  Trainer t(m, tc, comm);
  std::vector<double> out;
  for (int i = 0; i < kSteps; ++i) out.push_back(t.step(x, y, rows, kS).loss);
  return out;
}

TEST(GpuNcclRank, Worker) {
  const char* out_dir = std::getenv("MOCBENCH_TEST_OUT");
  if (out_dir == nullptr) GTEST_SKIP() << "run by GpuNccl.TwoProcesses*";
  const DistEnv d = read_dist_env();
  auto ops = cuda::make_cuda_ops(0);
  const auto comm = cuda::make_nccl_communicator(*ops, acquire_nccl_id(d, [] { return cuda::nccl_unique_id(); }), d.rank, d.world);
  std::ofstream out(std::filesystem::path(out_dir) / ("rank" + std::to_string(d.rank) + ".txt"));
  out.precision(17);
  // Collectives: all-reduce f32 and bf16, reduce to rank 1, broadcast from rank 0, all-gather.
  const std::size_t n = 100003;
  auto vals = exact_values(d.rank, n);
  Tensor a = ops->empty({static_cast<std::int64_t>(n)}, DType::f32, workspace_tag());
  Tensor b = ops->empty({static_cast<std::int64_t>(n)}, DType::bf16, workspace_tag());
  Tensor c = ops->empty({static_cast<std::int64_t>(n)}, DType::f32, workspace_tag());
  Tensor e = ops->empty({static_cast<std::int64_t>(n)}, DType::bf16, workspace_tag());
  for (Tensor* t : {&a, &b, &c, &e}) ops->upload_f32(*t, vals);
  comm->start({{&a, -1}, {&b, -1}, {&c, 1}});
  comm->wait();
  comm->broadcast({{&e, 0}});
  for (Tensor* t : {&a, &b, &c, &e}) {
    double sum = 0;
    for (float f : ops->download_f32(*t)) sum += f;
    out << sum << " ";
  }
  // Element-wise for a: write a checksum weighting each position differently.
  const auto av = ops->download_f32(a);
  double w = 0;
  for (std::size_t i = 0; i < av.size(); ++i) w += av[i] * static_cast<double>(i % 97 + 1);
  out << w << "\n";
  for (double g : comm->all_gather({10.0 * d.rank, 1.0 + d.rank})) out << g << " ";
  out << "\n";
  const CommTimes ct = comm->take_times();
  out << ct.bytes << " " << ct.busy_ms << "\n";
  // Training on this rank's half of the batch.
  for (const auto& v : kVariants) {
    for (double l : train_losses(*ops, d.rank * kB / d.world, kB / d.world, comm.get(), v)) out << l << " ";
    out << "\n";
  }
}

TEST(GpuNccl, TwoProcessesAllReduceExactlyAndTrainLikeOneGpuOnTheWholeBatch) {
  MOC_GPU_OR_SKIP(gpu);
  if (!cuda::nccl_available()) GTEST_SKIP() << "this build has no NCCL";
  const int gpus = static_cast<int>(cuda::list_gpus().size());
  const auto dir = std::filesystem::temp_directory_path() / ("mocbench-nccl-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto devices = visible_devices(std::getenv("CUDA_VISIBLE_DEVICES"), gpus);
  std::vector<pid_t> pids;
  std::string exe = std::filesystem::read_symlink("/proc/self/exe").string(), filter = "--gtest_filter=GpuNcclRank.Worker";
  for (int r = 0; r < 2; ++r) {
    auto add = worker_environment(r, 2, "MOCBENCH_NCCL_ID_FILE=" + (dir / "id").string(),
                                  gpus >= 2 ? devices : std::vector<std::string>{devices[0], devices[0]});
    add.push_back("MOCBENCH_TEST_OUT=" + dir.string());
    std::vector<std::string> env;
    // (Not this run's GoogleTest sharding: a worker given GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX may shard its one
    // test away, run nothing and exit 0 -- seen running the test binary in 8 shards on one GPU.)
    for (char** e = environ; *e; ++e)
      if (std::strncmp(*e, "GTEST_SHARD", 11) != 0 && std::strncmp(*e, "GTEST_TOTAL_SHARDS", 18) != 0)
        env.emplace_back(*e);
    env.insert(env.end(), add.begin(), add.end());
    std::vector<char*> envp, argv = {exe.data(), filter.data(), nullptr};
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    // Each worker's output to a file, shown when it fails (on one GPU the refusal is expected, not noise).
    const std::string log = (dir / ("rank" + std::to_string(r) + ".log")).string();
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    ASSERT_EQ(rc, 0);
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  std::vector<std::vector<std::vector<double>>> lines(2);
  for (int r = 0; r < 2; ++r) {
    std::ifstream f(dir / ("rank" + std::to_string(r) + ".txt"));
    std::string line;
    while (std::getline(f, line)) {
      std::istringstream is(line);
      lines[static_cast<std::size_t>(r)].emplace_back(std::istream_iterator<double>(is), std::istream_iterator<double>());
    }
  }
  std::string logs;
  for (int r = 0; r < 2; ++r) {
    std::ifstream f(dir / ("rank" + std::to_string(r) + ".log"));
    logs += "--- rank " + std::to_string(r) + "\n" + std::string(std::istreambuf_iterator<char>(f), {});
  }
  std::filesystem::remove_all(dir);
  if (!ok && gpus < 2 && lines[0].size() < 2)
    GTEST_SKIP() << "one GPU, and this NCCL refuses two ranks on it ("
                 << (logs.find("invalid usage") != std::string::npos ? "ncclCommInitRank: invalid usage" : "see the workers' logs")
                 << "); run on a machine with two GPUs";
  ASSERT_TRUE(ok) << "a worker failed:\n" << logs;
  ASSERT_EQ(lines[0].size(), 3u + std::size(kVariants));
  ASSERT_EQ(lines[1].size(), lines[0].size());
  // Expected collectives from the ranks' inputs, on the host in f64.
  const std::size_t n = 100003;
  const auto v0 = exact_values(0, n), v1 = exact_values(1, n);
  double mean_sum = 0, own0 = 0, own1 = 0, weighted = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double m = (static_cast<double>(v0[i]) + v1[i]) / 2;
    mean_sum += m;
    own0 += v0[i];
    own1 += v1[i];
    weighted += m * static_cast<double>(i % 97 + 1);
  }
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    const auto& l = lines[static_cast<std::size_t>(r)];
    EXPECT_EQ(l[0][0], mean_sum) << "f32 all-reduce";
    EXPECT_EQ(l[0][1], mean_sum) << "bf16 all-reduce";
    EXPECT_EQ(l[0][2], r == 1 ? mean_sum : own0) << "reduce to rank 1 leaves rank 0's own";
    EXPECT_EQ(l[0][3], own0) << "broadcast from rank 0";
    EXPECT_EQ(l[0][4], weighted) << "element by element";
    EXPECT_EQ(l[1], (std::vector<double>{0, 1, 10, 2}));
    EXPECT_GT(l[2][0], 0.0);
  }
  (void)own1;
  // Training: one GPU on the whole batch is the reference.
  for (std::size_t vi = 0; vi < std::size(kVariants); ++vi) {
    SCOPED_TRACE(kVariants[vi].name);
    const auto one = train_losses(*gpu, 0, kB, nullptr, kVariants[vi]);
    const auto& r0 = lines[0][3 + vi];
    const auto& r1 = lines[1][3 + vi];
    ASSERT_EQ(r0.size(), static_cast<std::size_t>(kSteps));
    EXPECT_EQ(r0, r1) << "both ranks report the mean loss";
    for (int i = 0; i < kSteps; ++i)
      EXPECT_NEAR(r0[static_cast<std::size_t>(i)], one[static_cast<std::size_t>(i)], 0.02 * one[static_cast<std::size_t>(i)])
          << "step " << i;
    EXPECT_LT(one.back(), one.front());
  }
}

}  // namespace
}  // namespace moc
#endif
