// Communication between data-parallel ranks (issue 15), backend-neutral: one rank's end of a communicator.
// Implementations: NCCL over the ranks' GPUs (kernels/cuda/nccl.h); LocalCommunicator (kernels/local_comm.h),
// in-process threads on any backend, the exact reference the others are checked against; and the CPU
// backend's ShmCommunicator (kernels/cpu/shm_comm.h), processes of one machine meeting in shared memory, so
// mocbench's multi-process launcher is exercised without GPUs.
//
// Every rank must issue the same calls in the same order (NCCL's rule); the values may differ.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/tensor.h"

namespace moc {
class Ops;
}

namespace moc {

// One tensor of a bucket: root < 0: it becomes the mean over the ranks on every rank (all-reduce); root >= 0:
// the mean lands on rank `root` only (reduce; ZeRO-1's reduce-scatter at tensor granularity), the other ranks'
// copies are left as they were.
struct CommItem {
  Tensor* tensor = nullptr;
  int root = -1;
};

// Communication of the steps since the last take_times(): busy_ms is the time the transfers ran (on the GPU
// the communication stream's kernels, from CUDA events), exposed_ms the part of it the compute stream waited
// for after its own work (wait()); bytes the payload handed to the collectives.
struct CommTimes {
  double busy_ms = 0, exposed_ms = 0;
  double bytes = 0;
  int calls = 0;
};

// The ranks' common state (this rank's Ops, its rank and the world size, the communication times) lives here;
// an implementation supplies the transfers.
class Communicator {
 public:
  Communicator(Ops& ops, int rank, int world) : ops_(&ops), rank_(rank), world_(world) {}
  virtual ~Communicator() = default;
  // In place and in order with the caller's work: each tensor (f32 or bf16, the same shapes on every rank, on
  // this rank's device) becomes the mean over the ranks.
  void all_reduce_mean(const std::vector<Tensor*>& tensors) { reduce_mean(tensors, -1); }
  // Starts a bucket once the work issued so far has produced it; on the GPU it runs on a second stream beside
  // the work issued after it (backward's earlier layers). wait() orders later work after every started bucket.
  // The base class runs the bucket at once (a synchronous transport has nothing to overlap).
  virtual void start(const std::vector<CommItem>& bucket);
  virtual void wait() {}
  // In place: each tensor takes rank `root`'s value (after a sharded optimizer step, the owner's parameter).
  virtual void broadcast(const std::vector<CommItem>& items) = 0;
  // Every rank's values, rank by rank (each rank passes the same count): per-rank metrics for rank 0.
  virtual std::vector<double> all_gather(const std::vector<double>& values) = 0;
  // The mean over the ranks of a host value: every rank sums the same gathered values in rank order, so every
  // rank gets the same bits.
  double mean(double value) {
    double s = 0;
    for (double v : all_gather({value})) s += v;
    return s / world_;
  }
  virtual CommTimes take_times() { return std::exchange(times_, {}); }
  // Later calls use `ops` (its device buffers and, on the GPU, its stream): a runner that makes a new backend
  // per sweep point keeps one communicator (NCCL's creation is collective and slow). Same device only.
  void bind(Ops& ops) { ops_ = &ops; }
  int rank() const { return rank_; }
  int world() const { return world_; }

 protected:
  // The synchronous transfer: each tensor becomes the mean over the ranks on rank `root` (root < 0: on every
  // rank, an all-reduce); start() groups a bucket's items into such calls.
  virtual void reduce_mean(const std::vector<Tensor*>& tensors, int root) = 0;
  Ops* ops_;
  int rank_, world_;
  CommTimes times_;  // since the last take_times()
};

inline void Communicator::start(const std::vector<CommItem>& bucket) {
  std::vector<Tensor*> everyone;
  std::vector<std::vector<Tensor*>> to_root(static_cast<std::size_t>(world()));
  for (const auto& it : bucket) (it.root < 0 ? everyone : to_root.at(static_cast<std::size_t>(it.root))).push_back(it.tensor);
  if (!everyone.empty()) all_reduce_mean(everyone);
  for (int r = 0; r < world(); ++r)
    if (!to_root[static_cast<std::size_t>(r)].empty()) reduce_mean(to_root[static_cast<std::size_t>(r)], r);
}

}  // namespace moc
