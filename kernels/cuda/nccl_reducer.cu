#include "kernels/cuda/nccl.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#ifdef MOCBENCH_HAVE_NCCL
#include <nccl.h>
#endif

namespace moc::cuda {

#ifdef MOCBENCH_HAVE_NCCL
namespace {

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string("NCCL: ") + what + ": " + ncclGetErrorString(r));
}
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    default: throw std::invalid_argument("NCCL: all_reduce_mean takes f32 or bf16 tensors");
  }
}

// Buckets run on a second stream (side_): an event recorded on the compute stream when the bucket is ready,
// the collectives on side_, and wait() makes the compute stream wait for side_. Each bucket is bracketed by
// timing events on side_ (its busy time); wait() also records when the compute stream got there, so the
// exposed part is the time from there to side_'s end. Every other call (mean, all_gather, broadcast) runs on
// the compute stream after wait(), so all of the communicator's work is ordered by streams and events, the
// same on every rank.
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Ops& ops, const std::vector<unsigned char>& id, int rank, int world)
      : Communicator(ops, rank, world) {
    if (id.size() != sizeof(ncclUniqueId)) throw std::invalid_argument("NCCL: the unique id must be 128 bytes");
    ncclUniqueId uid;
    std::memcpy(uid.internal, id.data(), sizeof uid.internal);
    check(ncclCommInitRank(&comm_, world, uid, rank), "ncclCommInitRank");
    check(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), "cudaStreamCreate (communication)");
    check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~NcclCommunicator() override {
    for (auto e : events_) cudaEventDestroy(e);
    cudaEventDestroy(ready_);
    cudaStreamDestroy(side_);
    cudaFree(scratch_);
    ncclCommDestroy(comm_);
  }
  void start(const std::vector<CommItem>& bucket) override {
    check(cudaEventRecord(ready_, stream()), "cudaEventRecord (bucket ready)");
    check(cudaStreamWaitEvent(side_, ready_, 0), "cudaStreamWaitEvent (bucket ready)");
    check(cudaEventRecord(event(used_++), side_), "cudaEventRecord");
    check(ncclGroupStart(), "ncclGroupStart");
    for (const auto& it : bucket) launch(*it.tensor, it.root, side_);
    check(ncclGroupEnd(), "ncclGroupEnd");
    check(cudaEventRecord(event(used_++), side_), "cudaEventRecord");
    ++times_.calls;
    pending_ = true;
  }
  void wait() override {
    if (!pending_) return;
    waits_.push_back(used_);
    check(cudaEventRecord(event(used_++), stream()), "cudaEventRecord (compute done)");
    check(cudaEventRecord(event(used_++), side_), "cudaEventRecord (communication done)");
    check(cudaStreamWaitEvent(stream(), event(waits_.back() + 1), 0), "cudaStreamWaitEvent (communication done)");
    pending_ = false;
  }
  void broadcast(const std::vector<CommItem>& items) override {
    check(ncclGroupStart(), "ncclGroupStart");
    for (const auto& it : items)
      check(ncclBroadcast(it.tensor->raw(), it.tensor->raw(), static_cast<std::size_t>(it.tensor->numel()),
                          nccl_type(it.tensor->dtype()), it.root, comm_, stream()),
            "ncclBroadcast");
    check(ncclGroupEnd(), "ncclGroupEnd");
  }
  std::vector<double> all_gather(const std::vector<double>& values) override {
    const std::size_t n = values.size(), bytes = std::max<std::size_t>(1, n * static_cast<std::size_t>(world_)) * sizeof(double);
    if (bytes > scratch_bytes_) {
      cudaFree(scratch_);
      scratch_ = nullptr;
      check(cudaMalloc(&scratch_, bytes), "cudaMalloc (all_gather)");
      scratch_bytes_ = bytes;
    }
    auto* d = static_cast<double*>(scratch_);
    std::vector<double> out(n * static_cast<std::size_t>(world_));
    const auto s = stream();
    check(cudaMemcpyAsync(d + n * static_cast<std::size_t>(rank_), values.data(), n * sizeof(double), cudaMemcpyHostToDevice, s),
          "cudaMemcpyAsync (all_gather)");
    check(ncclAllGather(d + n * static_cast<std::size_t>(rank_), d, n, ncclFloat64, comm_, s), "ncclAllGather");
    check(cudaMemcpyAsync(out.data(), d, out.size() * sizeof(double), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync (all_gather)");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize (all_gather)");
    return out;
  }
  CommTimes take_times() override {
    wait();
    CommTimes t = times_;
    if (used_ > 0) {
      check(cudaEventSynchronize(event(used_ - 1)), "cudaEventSynchronize (communication)");
      // Bucket pairs precede each wait()'s pair; walk them in order.
      std::size_t i = 0;
      while (i + 1 < used_) {
        if (std::find(waits_.begin(), waits_.end(), i) != waits_.end()) {
          float ms = 0;
          check(cudaEventElapsedTime(&ms, event(i), event(i + 1)), "cudaEventElapsedTime");
          t.exposed_ms += std::max(0.0f, ms);
        } else {
          float ms = 0;
          check(cudaEventElapsedTime(&ms, event(i), event(i + 1)), "cudaEventElapsedTime");
          t.busy_ms += ms;
        }
        i += 2;
      }
    }
    used_ = 0;
    waits_.clear();
    times_ = {};
    return t;
  }

 protected:
  void reduce_mean(const std::vector<Tensor*>& tensors, int root) override {
    check(ncclGroupStart(), "ncclGroupStart");
    for (Tensor* t : tensors) launch(*t, root, stream());
    check(ncclGroupEnd(), "ncclGroupEnd");
  }

 private:
  cudaStream_t stream() const { return static_cast<cudaStream_t>(ops_->stream()); }
  cudaEvent_t event(std::size_t i) {
    while (events_.size() <= i) {
      cudaEvent_t e;
      check(cudaEventCreate(&e), "cudaEventCreate");
      events_.push_back(e);
    }
    return events_[i];
  }
  void launch(Tensor& t, int root, cudaStream_t s) {
    const auto n = static_cast<std::size_t>(t.numel());
    times_.bytes += static_cast<double>(t.nbytes());
    if (root < 0) check(ncclAllReduce(t.raw(), t.raw(), n, nccl_type(t.dtype()), ncclAvg, comm_, s), "ncclAllReduce");
    else check(ncclReduce(t.raw(), t.raw(), n, nccl_type(t.dtype()), ncclAvg, root, comm_, s), "ncclReduce");
  }
  ncclComm_t comm_ = nullptr;
  cudaStream_t side_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  std::vector<cudaEvent_t> events_;  // timing events, in pairs, reused every step
  std::size_t used_ = 0;
  std::vector<std::size_t> waits_;  // where each wait()'s pair (compute done, communication done) starts
  bool pending_ = false;
  void* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
};

}  // namespace

bool nccl_available() { return true; }

std::vector<unsigned char> nccl_unique_id() {
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return std::vector<unsigned char>(id.internal, id.internal + sizeof id.internal);
}

std::unique_ptr<Communicator> make_nccl_communicator(Ops& ops, const std::vector<unsigned char>& id, int rank, int world) {
  return std::make_unique<NcclCommunicator>(ops, id, rank, world);
}
#else
bool nccl_available() { return false; }
std::vector<unsigned char> nccl_unique_id() { throw std::runtime_error("this build has no NCCL"); }
std::unique_ptr<Communicator> make_nccl_communicator(Ops&, const std::vector<unsigned char>&, int, int) {
  throw std::runtime_error("this build has no NCCL");
}
#endif

}  // namespace moc::cuda
