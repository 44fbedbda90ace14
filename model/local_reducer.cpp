#include "model/local_reducer.h"

namespace moc {

LocalReduceGroup::LocalReduceGroup(int world)
    : world_(world), barrier_(world), grads_(static_cast<std::size_t>(world)), losses_(static_cast<std::size_t>(world)) {}

void LocalGradReducer::reduce_gradients(std::vector<Param>& params) {
  auto& g = *group_;
  auto& mine = g.grads_[static_cast<std::size_t>(rank_)];
  mine.clear();
  for (auto& p : params) mine.push_back(ops_->download_f32(p.grad));
  g.barrier_.arrive_and_wait();  // every rank's gradients are in
  for (std::size_t i = 0; i < params.size(); ++i) {
    std::vector<float> mean(mine[i].size());
    for (std::size_t j = 0; j < mean.size(); ++j) {
      double s = 0;
      for (int r = 0; r < g.world_; ++r) s += g.grads_[static_cast<std::size_t>(r)][i][j];
      mean[j] = static_cast<float>(s / g.world_);
    }
    ops_->upload_f32(params[i].grad, mean);
  }
  g.barrier_.arrive_and_wait();  // nobody overwrites its buffers while another rank still reads them
}

double LocalGradReducer::reduce_loss(double local_mean_loss) {
  auto& g = *group_;
  g.losses_[static_cast<std::size_t>(rank_)] = local_mean_loss;
  g.barrier_.arrive_and_wait();
  double s = 0;
  for (double l : g.losses_) s += l;
  g.barrier_.arrive_and_wait();
  return s / g.world_;
}

}  // namespace moc
