// Device-side stage stamps of mocbench's own kernels -- the decode FFN kernels of the kernel path
// (ffn_decode.cu: k_gate, k_select, k_updown) by stage, the profiler's spin kernel (profiler_probe.cu)
// whole: where the time inside one kernel goes, which CUPTI cannot see (it times whole kernels). Device
// helpers below (nvcc only); the per-device buffer and its read-back in stage_stamps.cu (set_stamping,
// take_stamps, declared below). %globaltimer is read by one thread of each block, reduced with atomics into
// a device buffer, read back after the step.
//
// Per launch (a slot of the buffer): the earliest block start, the latest block end, and per mark m (the
// kernel's stage boundaries, in the order every block passes them) the latest time any block passed it.
// The stages [start, mark 0), [mark 0, mark 1), ..., [last mark, end) then tile the kernel from its first
// block's start to its last block's end. A mark's code says which stage ends there. Off (the flag in the
// buffer is 0), a kernel reads the flag once per block and pays predicated branches.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/ops.h"

namespace moc::cuda::step {  // "step": the name is historical (the stamps began in a decode-step kernel)

enum class StageId : unsigned {
  gate = 1,  // k_gate: the gate GEMV g = x W_gate (a:b with b | 16: and the selection, in its epilogue)
  gate_up,   // k_updown, dense: gate and up in one pass (z = SiLU(g) u); their rows are read together
  topk,      // k_select: each row's kept channels chosen from g (row top-K, other a:b, forced selections)
  up,        // k_updown, MoC: the kept channels' up GEMV and z
  down,      // k_updown: W_down rows of the kept channels, added to the output
  work,      // a kernel stamped whole (no stage marks): its first block's start to its last block's end
};
// Which kernel a slot holds (its CUPTI short name: stamp_kernel_name). 0 is not used (it was the retired
// persistent decode step's k_step).
enum class StampKernel : unsigned { spin = 1, k_gate = 2, k_select = 3, k_updown = 4 };
const char* stamp_kernel_name(StampKernel k);  // "spin_kernel", "k_gate", "k_select", "k_updown"
const char* stage_name(StageId s);  // "gate", "gate & up", "top-K", "up", "down", "work"

// Launches one read-back holds (more are counted dropped): a kernel-path decode step stamps its FFN kernels,
// up to 3 per layer (72 for the 1b model's 24 layers).
constexpr int kStampLaunches = 128;
constexpr int kStampMarks = 4;  // marks per launch: k_updown passes one, the others none

struct StampMark {
  unsigned long long t;     // latest time a block passed the mark (%globaltimer ns)
  unsigned code;            // (layer + 1) << 8 | StageId of the stage that ends here (0: unused)
  unsigned pad;
};
struct StampSlot {
  unsigned long long start_inv;  // ~(earliest block start): atomicMax of the complement
  unsigned long long end;        // latest block end
  unsigned blocks, tail;         // blocks of the launch; StageId of the stage after the last mark
  unsigned kernel, pad;          // StampKernel
  StampMark mark[kStampMarks];
};
struct StampBuf {
  unsigned on;       // 1: stamp the launches that start now
  unsigned dropped;  // stamped launches beyond kStampLaunches since the last read-back
  // exits and launch form one 64-bit word (exits low): a StampScope block takes (slot, ticket) from it with one
  // atomic; the block with the launch's last ticket moves it to (launch + 1, 0).
  unsigned exits;    // blocks of the running launch that left (spin kernel) or took their ticket (StampScope)
  unsigned launch;   // slot of the next launch
  StampSlot slot[kStampLaunches];
};

// The current device's stamp buffer (allocated and zeroed at the first call, which CudaOps makes when it
// starts, before any graph capture).
StampBuf* stamp_buffer();
// The same, or null where none was made yet (never allocates: callable during a graph capture).
StampBuf* stamp_buffer_if_made();

// Stage stamps of the kernels launched (or replayed from a graph) while stamping is on: set_stamping
// flips the current device's flag (synchronizes the device); take_stamps synchronizes, reads every stamped
// launch since the last call and clears them. Times on the device's %globaltimer clock (ns).
void set_stamping(bool on);
void prepare_stamps();  // allocates the current device's stamp buffer (outside any capture)
std::vector<StampedLaunch> take_stamps(std::uint64_t* dropped);

#ifdef __CUDACC__
// ---- device side. Only thread 0 of a block stamps; the other threads carry an empty Stamper.

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

struct Stamper {
  StampSlot* slot = nullptr;  // thread 0 of a stamped launch: its slot (null when the buffer is full)
  bool on = false;            // thread 0: this launch is stamped
  unsigned m = 0;             // marks passed
};

__device__ __forceinline__ unsigned stage_code(StageId s, int layer) {
  return (static_cast<unsigned>(layer + 1) << 8) | static_cast<unsigned>(s);
}

// A launch's slot, opened by each of its blocks: the launch's start is the earliest t of its first start_blocks
// blocks (in linear block order), and block 0 says what the launch is.
__device__ __forceinline__ void stamp_open(StampSlot* slot, int nb, unsigned kernel, unsigned tail, unsigned long long t,
                                           unsigned start_blocks) {
  const unsigned bi = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (bi < start_blocks) atomicMax(&slot->start_inv, ~t);
  if (bi == 0) {
    slot->blocks = static_cast<unsigned>(nb);
    slot->tail = tail;
    slot->kernel = kernel;
  }
}

// At the start of a kernel's work (after its dependency wait), every block: is this launch stamped, and
// into which slot (the spin kernel's protocol, with stamp_end; the launch's start is its earliest block's).
// Off, this is one load of the flag per block.
__device__ __forceinline__ void stamp_start(StampBuf* buf, int nb, Stamper& st, StampKernel kernel, StageId tail) {
  if (threadIdx.x != 0 || !buf) return;
  if (*reinterpret_cast<volatile unsigned*>(&buf->on) == 0) return;
  st.on = true;
  const unsigned l = *reinterpret_cast<volatile unsigned*>(&buf->launch);
  if (l >= static_cast<unsigned>(kStampLaunches)) return;
  st.slot = &buf->slot[l];
  stamp_open(st.slot, nb, static_cast<unsigned>(kernel), static_cast<unsigned>(tail), globaltimer(), ~0u);
}

// A stage boundary: every block passes it once, after a barrier of all its threads (StampScope::mark).
__device__ __forceinline__ void stamp_mark_passed(Stamper& st, StageId s, int layer) {
  if (threadIdx.x == 0 && st.slot && st.m < static_cast<unsigned>(kStampMarks)) {
    StampMark& k = st.slot->mark[st.m];
    atomicMax(&k.t, globaltimer());
    if (blockIdx.x == 0) k.code = stage_code(s, layer);
  }
  ++st.m;
}

// At the end of a kernel, every block (all threads): the block's end; the last block to leave a stamped
// launch advances the buffer to the next slot (the spin kernel's protocol; the kernel path uses StampScope).
__device__ __forceinline__ void stamp_end(StampBuf* buf, int nb, Stamper& st) {
  __syncthreads();
  if (threadIdx.x != 0 || !st.on) return;
  if (st.slot) atomicMax(&st.slot->end, globaltimer());
  __threadfence();
  if (atomicAdd(&buf->exits, 1u) == static_cast<unsigned>(nb) - 1) {
    buf->exits = 0;
    if (!st.slot) atomicAdd(&buf->dropped, 1u);
    atomicAdd(&buf->launch, 1u);
  }
}
// A kernel of the kernel path (one launch per op, chained with programmatic dependent launch) stamped by
// RAII: every block constructs one at its start; start() right after the block's dependency wait -- when the
// previous kernel of the stream, stamped or not, has completed, so the slot it takes is its own (a kernel's
// prologue before its wait, e.g. weights streamed early, is not its stamped work); claim() optionally at a
// later barrier; mark() at a stage boundary every block passes (all threads); the destructor at every return
// (all threads of the block return together in the kernels that use it). Every block of a launch must call
// start(): the launch's last ticket is what moves the buffer to the next slot. Lighter than stamp_start(all
// blocks) .. stamp_end, because these kernels are short and many per step: the launch's start is the earliest
// of its first kStartBlocks blocks (blocks are dispatched in index order; under PDL all of them leave the wait
// together), one ticket atomic per block, and the end an atomicMax per block, no fence (the next stamped launch
// takes its ticket only after this launch has completed: its own dependency wait).
constexpr unsigned kStartBlocks = 8;
struct StampScope {
  StampBuf* buf;
  int nb;
  Stamper st;
  // Thread 0 never waits on the buffer where its block would wait for it: start() takes the time and issues
  // its read of the flag; claim() (called by the kernel at a barrier at least one L2 round trip later, or by
  // the first mark or the end) takes the launch's slot and this block's ticket with one 64-bit atomic;
  // resolve() (the first mark or the end) uses them. Waiting on those reads at start and on a returning atomic
  // at the end cost 2-3% of a MoC decode step at batch 1 on an H100 (the selection kernel's one block held at
  // its first barrier and at its exit in every layer).
  unsigned long long t0 = 0, ticket = 0;
  unsigned on = 0;
  unsigned meta = 0;  // kernel | tail << 8 | started << 16 | claimed << 17 | resolved << 18
  __device__ explicit StampScope(StampBuf* b)
      : buf(b), nb(static_cast<int>(gridDim.x * gridDim.y * gridDim.z)) {}
  __device__ void start(StampKernel k, StageId t) {
    if (threadIdx.x != 0 || !buf) return;
    t0 = globaltimer();
    on = *reinterpret_cast<volatile unsigned*>(&buf->on);
    meta = static_cast<unsigned>(k) | static_cast<unsigned>(t) << 8 | 1u << 16;
  }
  // All threads may call it (thread 0 acts): after start(), once per block.
  __device__ void claim() {
    if (threadIdx.x != 0 || !buf || (meta & (1u << 17))) return;
    meta |= 1u << 17;
    if (!(meta & (1u << 16)) || on == 0) return;
    ticket = atomicAdd(reinterpret_cast<unsigned long long*>(&buf->exits), 1ull);
  }
  // Thread 0: the slot and the launch's start (stamp_open), and the launch's last ticket moves the
  // buffer to the next slot -- every block of this launch has its slot by then.
  __device__ void resolve() {
    claim();
    if (meta & (1u << 18)) return;
    meta |= 1u << 18;
    if (!(meta & (1u << 16)) || on == 0) return;
    const unsigned launch = static_cast<unsigned>(ticket >> 32);
    if (launch < static_cast<unsigned>(kStampLaunches)) {
      st.slot = &buf->slot[launch];
      stamp_open(st.slot, nb, meta & 0xffu, (meta >> 8) & 0xffu, t0, kStartBlocks);
    }
    if (static_cast<unsigned>(ticket) == static_cast<unsigned>(nb) - 1) {
      if (!st.slot) atomicAdd(&buf->dropped, 1u);
      atomicAdd(reinterpret_cast<unsigned long long*>(&buf->exits), (1ull << 32) - static_cast<unsigned long long>(nb));
    }
  }
  __device__ void mark(StageId s) {
    if (!buf) return;
    __syncthreads();
    mark_synced(s);
  }
  // The same after a barrier the kernel ran itself (of the threads that do the stage's work, thread 0 among them;
  // the dense ring kernel's producer warp does not stop for it).
  __device__ void mark_synced(StageId s) {
    if (!buf) return;
    if (threadIdx.x == 0) resolve();
    stamp_mark_passed(st, s, -1);
  }
  // The launch's end: the latest block end (no returning atomic: the block leaves at once).
  __device__ ~StampScope() {
    if (!buf) return;
    __syncthreads();
    if (threadIdx.x != 0) return;
    resolve();
    if (st.slot) atomicMax(&st.slot->end, globaltimer());
  }
  StampScope(const StampScope&) = delete;
  StampScope& operator=(const StampScope&) = delete;
};
#endif  // __CUDACC__

}  // namespace moc::cuda::step
