// Data-parallel groundwork (issue 15, part): the launch environment contract (mocbench's launcher, MPI,
// Slurm, torchrun-style variables; the NCCL id), the workers' environment, refusal of GPU counts the
// machine does not have, and the gradient bucketing plan.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <map>
#include <numeric>
#include <set>
#include <string>

#include "app/harness/dist_launch.h"
#include "model/config.h"
#include "model/grad_buckets.h"

namespace moc {
namespace {

EnvLookup env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* n) -> const char* {
    const auto it = vars.find(n);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

const std::string kId(256, 'a');

TEST(DistEnv, NoVariablesMeansOneProcess) {
  const DistEnv d = read_dist_env(env_of({}));
  EXPECT_EQ(d.world, 1);
  EXPECT_EQ(d.rank, 0);
  EXPECT_FALSE(d.distributed());
  EXPECT_EQ(d.source, "");
}

TEST(DistEnv, EachLauncherContractIsReadAndTheFirstWins) {
  struct Case {
    std::map<std::string, std::string> vars;
    std::string source;
    int rank, world, local;
  };
  const std::vector<Case> cases = {
      {{{"MOCBENCH_RANK", "1"}, {"MOCBENCH_WORLD_SIZE", "2"}, {"MOCBENCH_LOCAL_RANK", "0"}, {"MOCBENCH_NCCL_ID", kId}},
       "mocbench", 1, 2, 0},
      {{{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
        {"MOCBENCH_NCCL_ID_FILE", "/shared/id"}},
       "Open MPI", 5, 8, 1},
      {{{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "3"}, {"MOCBENCH_NCCL_ID", kId}}, "MPICH / Intel MPI", 3, 4, 3},
      {{{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "2"}, {"MOCBENCH_NCCL_ID_FILE", "/x"}}, "Slurm", 2, 16, 2},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MOCBENCH_NCCL_ID", kId}}, "torchrun-style", 0, 2, 0},
      // mocbench's own variables win over a surrounding Slurm job's.
      {{{"MOCBENCH_RANK", "0"}, {"MOCBENCH_WORLD_SIZE", "1"}, {"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "8"}}, "mocbench", 0, 1, 0},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.source);
    const DistEnv d = read_dist_env(env_of(c.vars));
    EXPECT_EQ(d.source, c.source);
    EXPECT_EQ(d.rank, c.rank);
    EXPECT_EQ(d.world, c.world);
    EXPECT_EQ(d.local_rank, c.local);
  }
  EXPECT_EQ(read_dist_env(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MOCBENCH_NCCL_ID", kId}})).nccl_id, kId);
}

void expect_refused(const std::map<std::string, std::string>& vars, const std::string& part) {
  SCOPED_TRACE(part);
  try {
    read_dist_env(env_of(vars));
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(DistEnv, PartialOrImpossibleSettingsAreRefusedNamingTheVariable) {
  expect_refused({{"MOCBENCH_RANK", "1"}}, "MOCBENCH_WORLD_SIZE is missing");
  expect_refused({{"MOCBENCH_LOCAL_RANK", "0"}}, "MOCBENCH_LOCAL_RANK is set without");
  expect_refused({{"MOCBENCH_RANK", "2"}, {"MOCBENCH_WORLD_SIZE", "2"}, {"MOCBENCH_LOCAL_RANK", "0"}}, "is not below");
  expect_refused({{"MOCBENCH_RANK", "x"}, {"MOCBENCH_WORLD_SIZE", "2"}}, "MOCBENCH_RANK='x' is not an integer");
  expect_refused({{"MOCBENCH_RANK", "0"}, {"MOCBENCH_WORLD_SIZE", "0"}}, "must be at least 1");
  expect_refused({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"MOCBENCH_NCCL_ID", kId}}, "SLURM_LOCALID is missing");
  expect_refused({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}}, "needs the NCCL unique id");
  expect_refused({{"MOCBENCH_NCCL_ID", "abc"}}, "256 hex digits");
  expect_refused({{"MOCBENCH_NCCL_ID", std::string(255, 'a') + "g"}}, "non-hex");
}

TEST(DistEnv, IdsRoundTripThroughHex) {
  std::vector<unsigned char> id(128);
  std::iota(id.begin(), id.end(), static_cast<unsigned char>(100));
  const std::string hex = id_to_hex(id);
  EXPECT_EQ(hex.size(), 256u);
  EXPECT_EQ(hex.substr(0, 4), "6465");
  EXPECT_EQ(id_from_hex(hex), id);
}

TEST(DistLaunch, WorkersGetTheContractOneGpuEachAndNoNvls) {
  const auto env = worker_environment(1, 2, "MOCBENCH_NCCL_ID=" + kId, {"3", "5"});
  const std::set<std::string> s(env.begin(), env.end());
  for (const char* v : {"MOCBENCH_RANK=1", "MOCBENCH_WORLD_SIZE=2", "MOCBENCH_LOCAL_RANK=0", "CUDA_VISIBLE_DEVICES=5",
                        "NCCL_NVLS_ENABLE=0"})
    EXPECT_TRUE(s.count(v)) << v;
  EXPECT_TRUE(s.count("MOCBENCH_NCCL_ID=" + kId));
  // What the workers' environment says is what read_dist_env understands.
  std::map<std::string, std::string> vars;
  for (const auto& kv : env) vars[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  const DistEnv d = read_dist_env(env_of(vars));
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.world, 2);
  EXPECT_EQ(d.nccl_id, kId);
}

TEST(DistLaunch, MoreGpusThanTheMachineHasAreRefusedBeforeAnyWork) {
  EXPECT_NO_THROW(check_gpu_count(2, 2));
  try {
    check_gpu_count(4, 2);
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("gpus = 4 but this machine has 2 usable GPUs"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_gpu_count(0, 2), ConfigError);
  EXPECT_THROW(worker_environment(0, 3, "MOCBENCH_NCCL_ID=" + kId, {"0", "1"}), ConfigError);
}

TEST(GradBuckets, EveryGradientOnceInReadyOrderWithinTheCap) {
  // Sizes as a model lists its parameters (embedding, layers, norm, head); backward finalizes them in reverse.
  const std::vector<std::size_t> bytes = {4000, 100, 900, 900, 2500, 100, 900, 900, 10, 4000};
  std::vector<std::size_t> order(bytes.size());
  std::iota(order.rbegin(), order.rend(), std::size_t{0});
  const auto buckets = plan_buckets(order, bytes, 2048, 256);
  std::vector<std::size_t> flat;
  for (const auto& b : buckets) {
    for (std::size_t j = 0; j < b.params.size(); ++j) {
      flat.push_back(b.params[j]);
      EXPECT_EQ(b.offsets[j] % 256, 0u);
      if (j > 0) {
        EXPECT_GE(b.offsets[j], b.offsets[j - 1] + bytes[b.params[j - 1]]) << "no overlap";
      }
      EXPECT_LE(b.offsets[j] + bytes[b.params[j]], b.bytes);
    }
    EXPECT_EQ(b.bytes % 256, 0u);
    // Within the cap, or one gradient larger than the cap alone.
    EXPECT_TRUE(b.bytes <= 2048 || b.params.size() == 1) << b.bytes;
  }
  EXPECT_EQ(flat, order) << "buckets follow the order gradients become final";
  // The head (4000 B > cap) goes alone and first: its all-reduce can start before the layers finish.
  ASSERT_GE(buckets.size(), 2u);
  EXPECT_EQ(buckets[0].params, (std::vector<std::size_t>{9}));
  // A cap larger than everything: one bucket.
  EXPECT_EQ(plan_buckets(order, bytes, 1 << 20).size(), 1u);
  EXPECT_THROW(plan_buckets({0, 0}, {1, 1}, 10), std::invalid_argument);
  EXPECT_THROW(plan_buckets({0}, {1, 1}, 10), std::invalid_argument);
}

}  // namespace
}  // namespace moc

#include <thread>
#include <unistd.h>
#include <chrono>

#include <filesystem>
#include <fstream>

#include "kernels/cpu/shm_comm.h"
#include "kernels/ops.h"
#include "kernels/local_comm.h"
#include "model/trainer.h"
#include "test_util.h"

namespace moc {
namespace {

// Two ranks, each on half of a fixed batch, with their gradients averaged = one process on the whole
// batch: the same loss curve and the same weights, up to f32 summation order. For every way the gradients
// travel: all after backward, in buckets as backward finalizes them (a small cap: many buckets), and ZeRO-1
// (each parameter's AdamW state on one rank, reduced to it, stepped there, broadcast back) = unsharded AdamW.
struct DpVariant {
  const char* name;
  bool overlap, zero1, fp32_master;
};

TEST(DataParallel, TwoRanksOnHalvesEqualOneProcessOnTheWholeBatch) {
  const DpVariant variants[] = {{"after-backward", false, false, false},
                                {"buckets", true, false, false},
                                {"zero1", true, true, false},
                                {"zero1-bf16-master", true, true, true}};
  for (const char* ffn : {"dense", "moc"})
    for (const auto& v : variants) {
      SCOPED_TRACE(std::string(ffn) + " " + v.name);
      ModelConfig cfg = preset("tiny");
      apply_override(cfg, "ffn", ffn);
      cfg.param_dtype = cfg.act_dtype = v.fp32_master ? DType::bf16 : DType::f32;
      const int B = 4, S = 8, steps = 5;
      std::mt19937 rng(11);
      const auto ids = test::random_ids(rng, static_cast<std::size_t>(B * S + 1), cfg.vocab);
      const std::vector<std::int32_t> tok(ids.begin(), ids.end() - 1), tgt(ids.begin() + 1, ids.end());
      TrainConfig tc;
      tc.warmup_steps = 2;
      tc.total_steps = steps;
      tc.clip_norm = 0.5f;  // clipping acts on the reduced gradient's norm: the same on both sides
      tc.fp32_master = v.fp32_master;
      tc.overlap = v.overlap;
      tc.zero1 = v.zero1;
      tc.bucket_bytes = 4096;  // many buckets

      auto ops1 = make_cpu_ops();
      Transformer whole(*ops1, cfg);
      Trainer t1(whole, tc);
      Tensor a = ops1->empty({B * S}, DType::i32, workspace_tag()), b = ops1->empty({B * S}, DType::i32, workspace_tag());
      ops1->upload_i32(a, tok);
      ops1->upload_i32(b, tgt);
      std::vector<double> losses1;
      for (int i = 0; i < steps; ++i) losses1.push_back(t1.step(a, b, B, S).loss);

      LocalCommGroup group(2);
      std::vector<std::vector<double>> losses(2);
      std::vector<std::vector<std::vector<float>>> weights(2);
      std::vector<std::int64_t> opt_bytes(2);
      std::vector<std::size_t> buckets(2);
      auto rank_main = [&](int rank) {
        auto ops = make_cpu_ops();
        Transformer m(*ops, cfg);  // the same seed: the same initial weights on both ranks
        LocalCommunicator comm(group, rank, *ops);
        Trainer t(m, tc, &comm);
        buckets[static_cast<std::size_t>(rank)] = t.buckets();
        opt_bytes[static_cast<std::size_t>(rank)] = ops->memory().live().category(MemCategory::optimizer_state);
        const int half = B / 2;
        const auto off = static_cast<std::ptrdiff_t>(rank * half * S);
        Tensor x = ops->empty({half * S}, DType::i32, workspace_tag()), y = ops->empty({half * S}, DType::i32, workspace_tag());
        ops->upload_i32(x, std::vector<std::int32_t>(tok.begin() + off, tok.begin() + off + half * S));
        ops->upload_i32(y, std::vector<std::int32_t>(tgt.begin() + off, tgt.begin() + off + half * S));
        for (int i = 0; i < steps; ++i) {
          const StepResult r = t.step(x, y, half, S);
          losses[static_cast<std::size_t>(rank)].push_back(r.loss);
          EXPECT_GT(r.comm.bytes, 0.0);
          EXPECT_GE(r.comm.calls, 1);
        }
        for (auto& p : m.params()) weights[static_cast<std::size_t>(rank)].push_back(ops->download_f32(p.value));
      };
      std::thread r1(rank_main, 1);
      rank_main(0);
      r1.join();
      if (v.overlap) {
        EXPECT_GT(buckets[0], 4u) << "a 4 KiB cap splits the tiny model's gradients";
      }
      const std::int64_t full = ops1->memory().live().category(MemCategory::optimizer_state);
      if (v.zero1) {
        // Each rank holds about half of the optimizer state, together all of it.
        EXPECT_EQ(opt_bytes[0] + opt_bytes[1], full);
        EXPECT_LT(opt_bytes[0], full * 0.6);
        EXPECT_LT(opt_bytes[1], full * 0.6);
      } else {
        EXPECT_EQ(opt_bytes[0], full);
      }
      const double tol = v.fp32_master ? 2e-3 : 1e-5;
      for (int i = 0; i < steps; ++i) {
        EXPECT_NEAR(losses[0][static_cast<std::size_t>(i)], losses1[static_cast<std::size_t>(i)], tol * losses1[static_cast<std::size_t>(i)]) << "step " << i;
        EXPECT_EQ(losses[0][static_cast<std::size_t>(i)], losses[1][static_cast<std::size_t>(i)]) << "both ranks report the mean";
      }
      for (std::size_t i = 0; i < whole.params().size(); ++i) {
        const auto w1 = ops1->download_f32(whole.params()[i].value);
        EXPECT_EQ(weights[0][i], weights[1][i]) << "the ranks stay identical: " << whole.params()[i].name;
        EXPECT_LT(test::rel_err(weights[0][i], w1), v.fp32_master ? 2e-2 : 1e-4) << whole.params()[i].name;
      }
    }
}


TEST(DistLaunch, WorkersGetTheGpusThisProcessSees) {
  EXPECT_EQ(visible_devices(nullptr, 3), (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(visible_devices("", 2), (std::vector<std::string>{"0", "1"}));
  // Worker i gets the i-th entry of CUDA_VISIBLE_DEVICES, not the machine's i-th GPU (UUIDs pass through).
  EXPECT_EQ(visible_devices("4, 6", 2), (std::vector<std::string>{"4", "6"}));
  EXPECT_EQ(visible_devices("GPU-ab12,GPU-cd34", 2), (std::vector<std::string>{"GPU-ab12", "GPU-cd34"}));
}

TEST(DistLaunch, TheNcclIdTravelsThroughTheIdFile) {
  const auto dir = std::filesystem::temp_directory_path() / ("mocbench-id-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  DistEnv d;
  d.world = 2;
  d.nccl_id_file = (dir / "nccl.id").string();
  d.id_timeout_s = 30;
  std::vector<unsigned char> id(128);
  std::iota(id.begin(), id.end(), static_cast<unsigned char>(7));
  int made = 0;
  // Rank 1 starts first and waits; rank 0 makes the id and writes it.
  std::vector<unsigned char> got1;
  std::thread waiter([&] {
    DistEnv r1 = d;
    r1.rank = 1;
    got1 = acquire_nccl_id(r1, [&]() -> std::vector<unsigned char> { throw std::logic_error("rank 1 must not make the id"); });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  DistEnv r0 = d;
  r0.rank = 0;
  EXPECT_EQ(acquire_nccl_id(r0, [&] {
              ++made;
              return id;
            }),
            id);
  waiter.join();
  EXPECT_EQ(got1, id);
  EXPECT_EQ(made, 1);
  // From the environment's hex, nobody makes one.
  DistEnv hex = d;
  hex.rank = 1;
  hex.nccl_id = id_to_hex(id);
  EXPECT_EQ(acquire_nccl_id(hex, [&]() -> std::vector<unsigned char> { throw std::logic_error("no"); }), id);
  // A rank that never sees the file gives up with what to check.
  DistEnv lonely = d;
  lonely.rank = 1;
  lonely.nccl_id_file = (dir / "never.id").string();
  lonely.id_timeout_s = 0.1;
  try {
    acquire_nccl_id(lonely, [] { return std::vector<unsigned char>(128); });
    ADD_FAILURE() << "no timeout";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0's NCCL id"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// The CPU backend's multi-process communicator against the in-process reference, with slots small enough
// that every tensor goes in several chunks (ranks are threads here; the barrier is process-shared either way).
TEST(ShmComm, MatchesTheInProcessReference) {
  const auto file = (std::filesystem::temp_directory_path() / ("mocbench-shm-" + std::to_string(::getpid()))).string();
  create_shm_comm_file(file, 2, 40);  // 5 doubles per rank
  LocalCommGroup group(2);
  std::vector<std::vector<std::vector<float>>> shm_out(2), ref_out(2);
  std::vector<std::vector<double>> gathered(2);
  std::vector<double> means(2);
  auto rank_main = [&](int rank) {
    auto ops = make_cpu_ops();
    const auto comm = open_shm_communicator(file, rank, 2, *ops);
    LocalCommunicator ref(group, rank, *ops);
    std::mt19937 rng(static_cast<std::uint32_t>(100 + rank));
    auto fresh = [&] {
      std::vector<Tensor> t;
      t.push_back(test::random_tensor(*ops, rng, {3, 7}));
      t.push_back(test::random_tensor(*ops, rng, {13}, 1.0f, DType::bf16));
      t.push_back(test::random_tensor(*ops, rng, {2, 2}));
      return t;
    };
    auto a = fresh();
    rng.seed(static_cast<std::uint32_t>(100 + rank));
    auto b = fresh();  // the same values
    // all-reduce, reduce to rank 1 (the third tensor), broadcast from rank 0 (the first).
    comm->start({{&a[0], -1}, {&a[1], -1}, {&a[2], 1}});
    comm->wait();
    ref.start({{&b[0], -1}, {&b[1], -1}, {&b[2], 1}});
    comm->broadcast({{&a[0], 0}});
    ref.broadcast({{&b[0], 0}});
    for (auto& t : a) shm_out[static_cast<std::size_t>(rank)].push_back(ops->download_f32(t));
    for (auto& t : b) ref_out[static_cast<std::size_t>(rank)].push_back(ops->download_f32(t));
    gathered[static_cast<std::size_t>(rank)] = comm->all_gather({1.0 * rank, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0 + rank});
    means[static_cast<std::size_t>(rank)] = comm->mean(rank == 0 ? 1.5 : 2.5);
    const CommTimes t = comm->take_times();
    EXPECT_GT(t.bytes, 0.0);
    EXPECT_GE(t.calls, 1);
  };
  std::thread r1(rank_main, 1);
  rank_main(0);
  r1.join();
  std::filesystem::remove(file);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(shm_out[static_cast<std::size_t>(r)], ref_out[static_cast<std::size_t>(r)]) << "rank " << r;
  EXPECT_EQ(shm_out[0][0], shm_out[1][0]);
  EXPECT_EQ(shm_out[0][1], shm_out[1][1]);
  EXPECT_NE(shm_out[0][2], shm_out[1][2]) << "a reduce leaves the other rank's copy as it was";
  const std::vector<double> want = {0, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5, 6, 8};
  EXPECT_EQ(gathered[0], want);
  EXPECT_EQ(gathered[1], want);
  EXPECT_EQ(means[0], 2.0);
  EXPECT_EQ(means[1], 2.0);
  EXPECT_THROW(open_shm_communicator(file + ".missing", 0, 2, *make_cpu_ops()), std::runtime_error);
}

// Rank 0 ends with the point's metrics for all: throughput summed, the slowest step, each rank's own values.
TEST(DistMetrics, RankZeroGetsTheAggregateAndEveryRanksValues) {
  LocalCommGroup group(2);
  std::vector<std::vector<std::pair<std::string, double>>> out(2);
  auto rank_main = [&](int rank) {
    auto ops = make_cpu_ops();
    LocalCommunicator comm(group, rank, *ops);
    std::vector<std::pair<std::string, double>> m = {
        {"step_ms", rank == 0 ? 10.0 : 12.0}, {"tokens_per_s", rank == 0 ? 1000.0 : 900.0}, {"mfu_pct", rank == 0 ? 40.0 : 36.0},
        {"peak_optimizer_state_bytes", rank == 0 ? 100.0 : 80.0}, {"peak_bytes", rank == 0 ? 500.0 : 520.0}, {"loss_last", 3.0}};
    join_rank_metrics(comm, m);
    out[static_cast<std::size_t>(rank)] = m;
  };
  std::thread r1(rank_main, 1);
  rank_main(0);
  r1.join();
  std::map<std::string, double> m0(out[0].begin(), out[0].end());
  EXPECT_EQ(m0["tokens_per_s"], 1900.0);
  EXPECT_EQ(m0["tokens_per_s_per_gpu"], 950.0);
  EXPECT_EQ(m0["step_ms"], 12.0);
  EXPECT_EQ(m0["mfu_pct"], 38.0);
  EXPECT_EQ(m0["peak_bytes"], 500.0) << "memory per GPU is rank 0's";
  EXPECT_EQ(m0["peak_bytes_max"], 520.0);
  EXPECT_EQ(m0["ranks"], 2.0);
  EXPECT_EQ(m0["rank1_peak_optimizer_state_bytes"], 80.0);
  EXPECT_EQ(m0["rank0_tokens_per_s"], 1000.0);
  EXPECT_EQ(m0["rank1_step_ms"], 12.0);
  EXPECT_EQ(out[1].size(), 6u) << "the other ranks keep their own";
  // Ranks that measured different things are refused rather than mixed.
  LocalCommGroup g2(2);
  std::array<std::atomic<bool>, 2> threw{};  // set from two threads (a std::vector<bool> shares its bits: a race)
  auto bad = [&](int rank) {
    auto ops = make_cpu_ops();
    LocalCommunicator comm(g2, rank, *ops);
    std::vector<std::pair<std::string, double>> m = {{rank == 0 ? "a" : "b", 1.0}};
    try {
      join_rank_metrics(comm, m);
    } catch (const std::runtime_error&) {
      threw[static_cast<std::size_t>(rank)].store(true);
    }
  };
  std::thread b1(bad, 1);
  bad(0);
  b1.join();
  EXPECT_TRUE(threw[0].load() && threw[1].load());
}

}  // namespace
}  // namespace moc
