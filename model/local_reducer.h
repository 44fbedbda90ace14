// The in-process reference for data-parallel gradient reduction: N model replicas, one thread each, meet
// at a barrier and leave with the mean of their gradients (summed in f64 on the host, in rank order, so
// the result does not depend on which thread arrives first). Tests check two-rank training against
// single-process training on the concatenated batch with it, and the NCCL reducer against it.
#pragma once
#include <barrier>
#include <vector>

#include "model/trainer.h"

namespace moc {

class LocalReduceGroup {
 public:
  explicit LocalReduceGroup(int world);
  int world() const { return world_; }

 private:
  friend class LocalGradReducer;
  int world_;
  std::barrier<> barrier_;
  std::vector<std::vector<std::vector<float>>> grads_;  // [rank][param] as uploaded
  std::vector<double> losses_;
};

class LocalGradReducer final : public GradReducer {
 public:
  // ops: the backend this rank's model lives on.
  LocalGradReducer(LocalReduceGroup& group, int rank, Ops& ops) : group_(&group), rank_(rank), ops_(&ops) {}
  void reduce_gradients(std::vector<Param>& params) override;
  double reduce_loss(double local_mean_loss) override;
  int world() const override { return group_->world(); }

 private:
  LocalReduceGroup* group_;
  int rank_;
  Ops* ops_;
};

}  // namespace moc
