// Raw-pointer launch API of the persistent decode step (decode_step.cu): Ops::decode_step and
// Ops::ffn_decode_layers in one kernel. Semantics: kernels/ops.h.
//
// Design. One block of kThreads per SM, launched cooperatively (all blocks resident), runs every stage of the
// step; stages are separated by a grid barrier (a counter in global memory: red.release / ld.acquire), not
// by kernel boundaries. Before a block waits at a barrier it asks L2 for the weight rows it will read in
// the next stage (cp.async.bulk.prefetch: weights do not depend on activations), so the weight stream does
// not stop while stragglers finish. Per layer (rows R <= 4, residual stream kept in fp32):
//   qkv   every block normalizes x itself (no stage for RMSNorm); its range of the [q|k|v] output rows
//   attn  one block per (row, head): RoPE of q and of the new k/v, cache write (one head per kv group),
//         softmax over positions 0..pos (the new position read from the stage's output, not the cache)
//   o     the block's range of W_o's output rows, added to the residual stream
//   ffn   every block normalizes x again and owns a range of channels (whole a:b groups):
//         dense  g and u of its channels, z = SiLU(g) u
//         a:b    g, the group selection (local: no grid step), u of the kept channels
//         top-K  g, and a global histogram of the keys' top 11 bits (atomics) -> barrier -> block r finds
//                row r's exact threshold (key, channel) from the histogram and the row's candidates of the
//                threshold bin (radix passes in shared memory; ties to the lower channel), publishes it with
//                a flag; the other blocks prefetch the next stage's weights while they wait for the flags,
//                then compute u of their kept channels (W_down rows of those asked for L2 first)
//         each block writes its list of kept channels (the union over rows, with a row mask) and z
//   down  blocks own (256-column slice, group of channel lists): W_down rows of listed channels read once,
//         partial sums reduced over the block's warps in shared memory, added to x with fp32 atomics
// then the final RMSNorm and the LM head (rows of [vocab, d]) into f32 logits. ffn_decode_layers runs
// only the ffn/down stages per layer on a fixed x and adds the sum into out at the end.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace moc::cuda::step {

constexpr int kMaxLayers = 96;  // layer pointers travel in the kernel's parameters (__grid_constant__)
constexpr int kMaxRows = 4;

struct LayerPtrs {
  const void *attn_norm = nullptr, *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr, *ffn_norm = nullptr;
  const void *wg = nullptr, *wu = nullptr, *wd = nullptr;  // [d_ffn, d] each
  void *k_cache = nullptr, *v_cache = nullptr;             // [rows, kvh, max_seq, hd]
  const std::uint16_t* force = nullptr;                    // [rows, kept] or null
  std::uint16_t* idx_out = nullptr;                        // [rows, kept] or null
};

enum class Sel : int { dense = 0, topk = 1, grouped = 2 };

struct Problem {
  bool ffn_only = false;  // ffn_decode_layers: out += sum_l FFN_l(x)
  int rows = 1, d = 0, heads = 0, kv_heads = 0, head_dim = 0, d_ffn = 0, vocab = 0, layers = 0, max_seq = 0;
  float eps = 1e-5f, theta = 10000.0f;
  Sel sel = Sel::dense;
  int k = 0, group_a = 0, group_b = 0, rule = 0;
  const std::int32_t* tokens = nullptr;  // [rows]
  const std::int32_t* pos = nullptr;     // [rows]
  const void* embed = nullptr;           // [vocab, d]
  const void* final_norm = nullptr;      // [d]
  const void* lm_head = nullptr;         // [vocab, d]
  float* logits = nullptr;               // [rows, vocab]
  const void* x = nullptr;               // ffn_only: [rows, d]
  void* out = nullptr;                   // ffn_only: [rows, d], accumulated
  LayerPtrs layer[kMaxLayers];
  int kept() const;
};

// Why the persistent kernel cannot run this problem (bf16 only, rows <= 4, d % 8 == 0, d <= 8192, head_dim
// dividing 512, at most kMaxLayers layers, aligned pointers), or empty when it can.
std::string unsupported(const Problem& p);
// Device workspace one launch needs on a device with `blocks` blocks.
std::size_t workspace_bytes(const Problem& p, int blocks);
// Blocks the kernel runs with on the current device (one per SM, co-resident).
int grid_blocks();
// Issues the kernel (and a memset of its counters) on `stream`; graph-capturable. The kernel stamps its
// stages (stage_stamps.cuh) into this device's stamp buffer while stamping is on.
void launch(const Problem& p, void* workspace, std::size_t workspace_size, cudaStream_t stream);

// Stage stamps of the kernels launched (or replayed from a graph) while stamping is on: set_stamping
// flips the current device's flag (synchronizes the device); take_stamps synchronizes, reads every stamped
// launch since the last call and clears them. Times on the device's %globaltimer clock (ns).
void set_stamping(bool on);
void prepare_stamps();  // allocates the current device's stamp buffer (outside any capture)
std::vector<StampedLaunch> take_stamps(std::uint64_t* dropped);

}  // namespace moc::cuda::step
