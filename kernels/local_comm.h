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
  LocalCommunicator(LocalCommGroup& group, int rank, Ops& ops) : Communicator(ops, rank, group.world()), group_(&group) {}
  void broadcast(const std::vector<CommItem>& items) override;
  std::vector<double> all_gather(const std::vector<double>& values) override;

 protected:
  void reduce_mean(const std::vector<Tensor*>& tensors, int root) override;

 private:
  LocalCommGroup* group_;
};

}  // namespace moc
