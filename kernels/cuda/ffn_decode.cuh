// Raw-pointer launch API of the decode-time FFN kernels (ffn_decode.cu), for CudaOps and for the
// standalone micro-benchmark (bench/micro). Semantics: Ops::ffn_decode (kernels/ops.h).
//
// Pipeline (bf16, d % 8 == 0, rows <= 8 per chunk; other cases take a simple generic path):
//   dense: one kernel streams W_gate, W_up (mma.sync m16n8k16, fp32 accumulation) and W_down (cp.async
//          into shared memory) per group of 16 channels; partial outputs are reduced over a cluster of 8
//          blocks in distributed shared memory, then added with fp32 atomics into a workspace; the last
//          cluster of each column slice adds the workspace into out (one bf16 rounding).
//   MoC:   gate GEMV kernel whose epilogue writes the fp32 gate values and an 11-bit key histogram per row
//          (top-K) or selects a of every b channels (a:b, b | 16); its last block (atomic counter) finishes
//          the row top-K (histogram threshold, radix passes over the candidates of the threshold bin, ties to
//          the lower index) and writes idx_out and the union of the rows' channels with a row mask each.
//          The up/down kernel (launched with programmatic dependent launch) then reads only the W_up and
//          W_down rows of union channels, once per call.
// Everything is stream-ordered and graph-capturable: one cudaMemsetAsync of a small workspace head, no
// host synchronization, counters zeroed in the same call.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/ops.h"

namespace moc::cuda::ffn {

enum class SelKind : int { dense = 0, topk = 1, grouped = 2 };

struct Problem {
  int rows = 1, d = 0, d_ffn = 0;
  DType dtype = DType::bf16;  // of x, the three weights and out (all the same)
  const void* x = nullptr;    // [rows, d]
  const void* w_gate_t = nullptr, *w_up_t = nullptr, *w_down = nullptr;  // [d_ffn, d]
  void* out = nullptr;        // [rows, d], accumulated
  SelKind kind = SelKind::dense;
  int k = 0, group_a = 0, group_b = 0;
  SelectRule rule = SelectRule::gate;
  const std::uint16_t* force_idx = nullptr;  // [rows, kept] or null
  std::uint16_t* idx_out = nullptr;          // [rows, kept] or null
  unsigned parts = kFfnAll;
  int kept() const;  // channels kept per row (d_ffn when dense)
};

struct Options {
  bool pdl = true;         // programmatic dependent launch of the up/down kernel after the gate kernel
  bool allow_fast = true;  // false: always the generic path (tests of the fallback)
  int gate_unroll = 4;     // 32-column tiles in flight per warp in the gate GEMV (4 or 8)
  // Row top-K in the gate kernel's last block: 0 = global 11-bit key histogram from the gate epilogue, then
  // radix passes over the candidates (default); 1 = linear-bucket histogram built in the last block with
  // __match_any_sync aggregation; 2 = as 1 with plain shared atomics (not yet timed). bench/micro/NOTES.md.
  int select = 0;
};

// Bytes of device workspace one launch needs (any rows: chunks of 8 rows reuse it in stream order).
std::size_t workspace_bytes(const Problem& p);
// Checks the problem (std::invalid_argument naming ffn_decode) and issues the kernels on `stream`.
void launch(const Problem& p, void* workspace, std::size_t workspace_size, cudaStream_t stream,
            const Options& opt = {});
// True when launch() takes the fast path for this problem (bf16, aligned, d % 8 == 0, fits shared memory).
bool fast_path(const Problem& p, const Options& opt = {});

// Benchmark helper (fast path, MoC top-K or a:b, rows <= 8): re-issues only the up/down kernel on a workspace
// left by a previous full launch of the same problem (gate values and selection still there). Adds to out.
void launch_updown_only(const Problem& p, void* workspace, cudaStream_t stream, const Options& opt = {});

}  // namespace moc::cuda::ffn
