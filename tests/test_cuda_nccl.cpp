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
  Transformer m1(*gpu, cfg), m2(*gpu, cfg);
  Trainer t1(m1, {}), t2(m2, {}, comm.get());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(t1.step(tok, tgt, B, S).loss, t2.step(tok, tgt, B, S).loss) << "step " << i;
  for (std::size_t i = 0; i < m1.params().size(); ++i)
    EXPECT_EQ(gpu->download_f32(m1.params()[i].value), gpu->download_f32(m2.params()[i].value)) << m1.params()[i].name;
}

}  // namespace
}  // namespace moc
#endif
