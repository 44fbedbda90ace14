// A ring of shared-memory slots filled by bulk copies (cp.async.bulk, completing on one mbarrier per slot): the
// helpers of the decode kernels that stream their weights this way (ffn_decode_ring.cuh; a batch-1 QKV ring was
// tried and measured slower, bench/micro/NOTES.md).
// Protocol: slot s of item i = i % S; the producer (one thread) waits for empty[s]'s phase i / S - 1 (i >= S),
// arms full[s] with the item's bytes and issues its copies; each consumer warp waits for full[s]'s phase i / S,
// reads the slot and arrives on empty[s] -- every consumer thread after its own last read of the slot (empty[s] is
// initialized with the number of consumer threads), so that each thread's arrive releases its own reads (one lane
// arriving for its warp after __syncwarp orders them too, but compute-sanitizer racecheck does not credit the warp
// barrier and reported every refill of a slot as a hazard).
#pragma once
#include <cuda_runtime.h>

namespace moc::cuda::dev {

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}
// bytes (a multiple of 16) from global src to shared dst (both 16-byte aligned), completing on bar, under the L2
// policy pol (createpolicy; the ring's weights: decode_device.cuh's l2_stream_policy, evict first).
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, unsigned long long* bar,
                                          unsigned long long pol) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(pol)
      : "memory");
}
// A hand-over between warps of one block on named barrier ID (1-15) of N threads: the writers arrive (no wait; their
// earlier shared-memory writes are visible to the waiters after the barrier), the readers wait.
template <int ID, int N>
__device__ __forceinline__ void named_arrive() { asm volatile("bar.arrive %0, %1;" ::"n"(ID), "n"(N) : "memory"); }
template <int ID, int N>
__device__ __forceinline__ void named_sync() { asm volatile("bar.sync %0, %1;" ::"n"(ID), "n"(N) : "memory"); }
// A barrier of the first N threads only (a ring's consumer warps: the producer warp may be waiting for a slot):
// named barrier 1.
template <int N>
__device__ __forceinline__ void consumers_sync() { named_sync<1, N>(); }

}  // namespace moc::cuda::dev
