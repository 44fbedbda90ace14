// Device-side stage stamps of the persistent decode kernel (decode_step.cu): where the time inside one
// kernel goes, which CUPTI cannot see (it times whole kernels). Public persistent-kernel work times its
// stages the same way: %globaltimer read by one thread of each block, reduced with atomics into a device
// buffer, read back after the step.
//
// Per launch (a slot of the buffer): the earliest block start, the latest block end, and per mark m (the
// kernel's stage boundaries, in the order every block passes them) the latest time any block passed it --
// for a grid barrier, the last arrival, i.e. the moment the barrier opens -- with the time blocks spent
// waiting there summed over blocks. The stages [start, mark 0), [mark 0, mark 1), ..., [last mark, end)
// then tile the kernel from its first block's start to its last block's end. A mark's code says which
// stage ends there and of which layer. Off (the flag in the buffer is 0), a kernel reads the flag once per
// block and pays predicated branches.
#pragma once
#include <cstdint>

namespace moc::cuda::step {

enum class StageId : unsigned {
  start = 1,  // embedding rows (or the FFN input) into the residual stream; first weights asked for L2
  qkv,        // RMSNorm + the [q|k|v] GEMV
  attn,       // RoPE, KV-cache write, softmax over the cached positions
  o,          // W_o GEMV added to the residual stream
  gate,       // RMSNorm + the gate GEMV (top-K: + the histogram of its keys)
  gate_up,    // dense: RMSNorm + gate and up in one pass (z = SiLU(g) u); their rows are read together
  topk,       // top-K: each row's exact threshold found and published; every block waits for the flags
  up,         // the kept channels' up GEMV and z (a:b: the group selection happens here, locally)
  down,       // W_down rows of the kept channels, added to the residual stream
  head,       // the final RMSNorm and the LM head GEMV
  output,     // ffn_only: the accumulated FFN output written out
};
const char* stage_name(StageId s);  // "qkv", "attention", "o", "gate", "gate & up", "top-K", ...

constexpr int kStampLaunches = 32;                 // launches one read-back holds (more are counted dropped)
constexpr int kStampMarks = 8 * 96 + 4;             // marks per launch: at most 8 per layer (kMaxLayers 96)

struct StampMark {
  unsigned long long t;     // latest time a block passed the mark (%globaltimer ns)
  unsigned long long wait;  // ns blocks waited at it (barriers), summed over blocks
  unsigned code;            // (layer + 1) << 8 | StageId of the stage that ends here (0: unused)
  unsigned pad;
};
struct StampSlot {
  unsigned long long start_inv;  // ~(earliest block start): atomicMax of the complement
  unsigned long long end;        // latest block end
  unsigned blocks, tail;         // blocks of the launch; StageId of the stage after the last mark
  StampMark mark[kStampMarks];
};
struct StampBuf {
  unsigned on;       // 1: stamp the launches that start now
  unsigned launch;   // slot of the next launch (advanced by the last block to leave a stamped launch)
  unsigned exits;    // blocks of the running launch that left
  unsigned dropped;  // stamped launches beyond kStampLaunches since the last read-back
  StampSlot slot[kStampLaunches];
};

}  // namespace moc::cuda::step
