// In-process ranks for tests and reference: N threads, one Ops each, meet at a barrier; means are summed in
// f64 on the host in rank order (the result does not depend on which thread arrives first), so the NCCL
// communicator and data-parallel training have an exact reference on the CPU.
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
  std::vector<std::vector<double>> scalars_;             // [rank][value]
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(LocalCommGroup& group, int rank, Ops& ops) : group_(&group), rank_(rank), ops_(&ops) {}
  void all_reduce_mean(const std::vector<Tensor*>& tensors) override { reduce_mean(tensors, -1); }
  void broadcast(const std::vector<CommItem>& items) override;
  double mean(double value) override;
  std::vector<double> all_gather(const std::vector<double>& values) override;
  CommTimes take_times() override;
  void bind(Ops& ops) override { ops_ = &ops; }
  int rank() const override { return rank_; }
  int world() const override { return group_->world(); }

 protected:
  void reduce_mean(const std::vector<Tensor*>& tensors, int root) override;  // root < 0: every rank

 private:
  LocalCommGroup* group_;
  int rank_;
  Ops* ops_;
  CommTimes times_;
};

}  // namespace moc
