// GPU test helpers: tests named Gpu* get a CudaOps and a CpuOps, and skip cleanly without a GPU.
#pragma once
#include <gtest/gtest.h>

#include <memory>

#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "model/transformer.h"
#include "test_util.h"
#ifdef MOCBENCH_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace moc::testing {

inline std::unique_ptr<Ops> gpu_ops_or_null() {
#ifdef MOCBENCH_HAVE_CUDA
  if (cuda::gpu_available()) return cuda::make_cuda_ops(0);
#endif
  return nullptr;
}

// Copies each MoC layer's last selection from the GPU model onto the CPU model as a forced selection (the two
// backends may pick different channels near the K-th value; under one selection their outputs must agree).
inline void impose_selection(Transformer& gpu, Ops& gops, Transformer& cpu, Ops& cops) {
  for (int l = 0; l < gpu.config().layers; ++l) {
    const Tensor& g = gpu.ffn(l).selected();
    if (!g.defined()) continue;
    Tensor c = cops.empty(g.shape(), DType::i16, workspace_tag());
    const auto ids = gops.download_i32(g);
    std::vector<std::uint16_t> h(ids.begin(), ids.end());
    cops.upload(c, h.data());
    cpu.ffn(l).force_selection(c);
  }
}

// A mixture-of-experts model: the GPU's routing of every layer and each expert's MoC selection, forced
// onto the CPU model (routing near a tie of two logits, like a selection near the K-th value, may differ).
inline void impose_routing(Transformer& gpu, Ops& gops, Transformer& cpu, Ops& cops) {
  for (int l = 0; l < gpu.config().layers; ++l) {
    cpu.moe(l).force_routing(gpu.moe(l).routing());
    for (int e = 0; e < gpu.config().experts; ++e) {
      const Tensor& g = gpu.moe(l).expert(e).selected();
      if (!g.defined()) {
        cpu.moe(l).expert(e).clear_forced_selection();
        continue;
      }
      Tensor c = cops.empty(g.shape(), DType::i16, workspace_tag());
      const auto ids = gops.download_i32(g);
      std::vector<std::uint16_t> h(ids.begin(), ids.end());
      cops.upload(c, h.data());
      cpu.moe(l).expert(e).force_selection(c);
    }
  }
}

// After backward() on both: every parameter's gradient on the GPU within rel_tol of the CPU's (same order,
// same names).
inline void expect_gradients_match(Transformer& gpu, Ops& gops, Transformer& cpu, Ops& cops, double rel_tol) {
  const auto& gp = gpu.params();
  const auto& cp = cpu.params();
  ASSERT_EQ(gp.size(), cp.size());
  for (std::size_t i = 0; i < gp.size(); ++i) {
    ASSERT_EQ(gp[i].name, cp[i].name);
    EXPECT_LT(moc::test::rel_err(gops.download_f32(gp[i].grad), cops.download_f32(cp[i].grad)), rel_tol) << gp[i].name;
  }
}

}  // namespace moc::testing

// In a test body: `MOC_GPU_OR_SKIP(gpu);` declares std::unique_ptr<Ops> gpu or skips the test.
#define MOC_GPU_OR_SKIP(var)                                                     \
  auto var = ::moc::testing::gpu_ops_or_null();                                  \
  if (!var) GTEST_SKIP() << "no CUDA GPU here (the GPU tests run on the device)"
