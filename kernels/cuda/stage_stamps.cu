// The per-device stage-stamp buffer (stage_stamps.cuh) and its read-back: set_stamping, take_stamps.
#include <algorithm>
#include <cstddef>
#include <mutex>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/stage_stamps.cuh"

namespace moc::cuda::step {
namespace {

std::mutex stamp_mu;
StampBuf* stamp_bufs[64] = {};

StampBuf* stamp_buffer_locked() {
  int dev = 0;
  MOC_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64) return nullptr;
  if (!stamp_bufs[dev]) {
    void* p = nullptr;
    MOC_CUDA_CHECK(cudaMalloc(&p, sizeof(StampBuf)));
    MOC_CUDA_CHECK(cudaMemset(p, 0, sizeof(StampBuf)));
    MOC_CUDA_CHECK(cudaDeviceSynchronize());
    stamp_bufs[dev] = static_cast<StampBuf*>(p);
  }
  return stamp_bufs[dev];
}

}  // namespace

const char* stage_name(StageId s) {
  switch (s) {
    case StageId::gate: return "gate";
    case StageId::gate_up: return "gate & up";
    case StageId::topk: return "top-K";
    case StageId::up: return "up";
    case StageId::down: return "down";
    case StageId::work: return "work";
  }
  return "?";
}

const char* stamp_kernel_name(StampKernel k) {
  switch (k) {
    case StampKernel::spin: return "spin_kernel";
    case StampKernel::k_gate: return "k_gate";
    case StampKernel::k_select: return "k_select";
    case StampKernel::k_updown: return "k_updown";
  }
  return "?";
}

StampBuf* stamp_buffer_if_made() {
  std::lock_guard<std::mutex> lock(stamp_mu);
  int dev = 0;
  MOC_CUDA_CHECK(cudaGetDevice(&dev));
  return dev >= 0 && dev < 64 ? stamp_bufs[dev] : nullptr;
}

StampBuf* stamp_buffer() {
  std::lock_guard<std::mutex> lock(stamp_mu);
  return stamp_buffer_locked();
}

void prepare_stamps() { stamp_buffer(); }

void set_stamping(bool on) {
  std::lock_guard<std::mutex> lock(stamp_mu);
  StampBuf* b = stamp_buffer_locked();
  if (!b) return;
  MOC_CUDA_CHECK(cudaDeviceSynchronize());
  const unsigned v = on ? 1u : 0u;
  MOC_CUDA_CHECK(cudaMemcpy(&b->on, &v, sizeof v, cudaMemcpyHostToDevice));
}

std::vector<StampedLaunch> take_stamps(std::uint64_t* dropped) {
  std::lock_guard<std::mutex> lock(stamp_mu);
  std::vector<StampedLaunch> out;
  StampBuf* b = stamp_buffer_locked();
  if (!b) return out;
  MOC_CUDA_CHECK(cudaDeviceSynchronize());
  unsigned hdr[4] = {};
  static_assert(offsetof(StampBuf, slot) == sizeof hdr, "the header is four counters");
  static_assert(offsetof(StampBuf, exits) % 8 == 0 && offsetof(StampBuf, launch) == offsetof(StampBuf, exits) + 4,
                "exits and launch: one 64-bit word, exits low");
  MOC_CUDA_CHECK(cudaMemcpy(hdr, b, sizeof hdr, cudaMemcpyDeviceToHost));
  const unsigned launches = std::min<unsigned>(hdr[offsetof(StampBuf, launch) / 4], kStampLaunches);
  if (dropped) *dropped += hdr[offsetof(StampBuf, dropped) / 4];
  if (launches > 0) {
    std::vector<StampSlot> slots(launches);
    MOC_CUDA_CHECK(cudaMemcpy(slots.data(), b->slot, launches * sizeof(StampSlot), cudaMemcpyDeviceToHost));
    for (const StampSlot& sl : slots) {
      StampedLaunch L;
      L.kernel = stamp_kernel_name(static_cast<StampKernel>(sl.kernel));
      L.blocks = static_cast<int>(sl.blocks);
      L.start_ns = static_cast<std::int64_t>(~sl.start_inv);
      L.end_ns = static_cast<std::int64_t>(sl.end);
      // The stages tile the launch: each ends at its mark (the last block to pass it), the tail at the end.
      std::int64_t at = L.start_ns;
      for (int m = 0; m < kStampMarks && sl.mark[m].code != 0; ++m) {
        const StampMark& k = sl.mark[m];
        StampedStage st;
        st.layer = static_cast<int>(k.code >> 8) - 1;
        st.stage = stage_name(static_cast<StageId>(k.code & 0xffu));
        st.start_ns = at;
        st.end_ns = std::max(at, static_cast<std::int64_t>(k.t));
        at = st.end_ns;
        L.stages.push_back(std::move(st));
      }
      StampedStage tail;
      tail.stage = stage_name(static_cast<StageId>(sl.tail));
      tail.start_ns = at;
      tail.end_ns = std::max(at, L.end_ns);
      L.stages.push_back(std::move(tail));
      out.push_back(std::move(L));
    }
  }
  // Clear every slot used (and the counters), keeping the flag.
  const std::size_t used =
      offsetof(StampBuf, slot) + static_cast<std::size_t>(std::min<unsigned>(launches + 1, kStampLaunches)) * sizeof(StampSlot);
  MOC_CUDA_CHECK(cudaMemset(reinterpret_cast<unsigned char*>(b) + sizeof(unsigned), 0, used - sizeof(unsigned)));
  MOC_CUDA_CHECK(cudaDeviceSynchronize());
  return out;
}

}  // namespace moc::cuda::step
