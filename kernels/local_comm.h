// In-process ranks for tests and reference: N threads, one Ops each, meet at a barrier; all_reduce_mean sums
// in f64 on the host in rank order (the result does not depend on which thread arrives first), so the
// NCCL communicator and data-parallel training have an exact reference on the CPU.
#pragma once
#include <barrier>
#include <vector>

#include "kernels/comm.h"
#include "kernels/ops.h"

namespace moc {

class LocalCommGroup {
 public:
  explicit LocalCommGroup(int world);
  int world() const { return world_; }

 private:
  friend class LocalCommunicator;
  int world_;
  std::barrier<> barrier_;
  std::vector<std::vector<std::vector<float>>> values_;  // [rank][tensor]
  std::vector<double> scalars_;
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(LocalCommGroup& group, int rank, Ops& ops) : group_(&group), rank_(rank), ops_(&ops) {}
  void all_reduce_mean(const std::vector<Tensor*>& tensors) override;
  double mean(double value) override;
  int rank() const override { return rank_; }
  int world() const override { return group_->world(); }

 private:
  LocalCommGroup* group_;
  int rank_;
  Ops* ops_;
};

}  // namespace moc
