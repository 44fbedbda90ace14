#include "kernels/local_comm.h"

namespace moc {

LocalCommGroup::LocalCommGroup(int world)
    : world_(world), barrier_(world), values_(static_cast<std::size_t>(world)), scalars_(static_cast<std::size_t>(world)) {}

void LocalCommunicator::all_reduce_mean(const std::vector<Tensor*>& tensors) {
  auto& g = *group_;
  auto& mine = g.values_[static_cast<std::size_t>(rank_)];
  mine.clear();
  for (Tensor* t : tensors) mine.push_back(ops_->download_f32(*t));
  g.barrier_.arrive_and_wait();  // every rank's values are in
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    std::vector<float> mean(mine[i].size());
    for (std::size_t j = 0; j < mean.size(); ++j) {
      double s = 0;
      for (int r = 0; r < g.world_; ++r) s += g.values_[static_cast<std::size_t>(r)][i][j];
      mean[j] = static_cast<float>(s / g.world_);
    }
    ops_->upload_f32(*tensors[i], mean);
  }
  g.barrier_.arrive_and_wait();  // nobody refills its buffers while another rank still reads them
}

double LocalCommunicator::mean(double value) {
  auto& g = *group_;
  g.scalars_[static_cast<std::size_t>(rank_)] = value;
  g.barrier_.arrive_and_wait();
  double s = 0;
  for (double v : g.scalars_) s += v;
  g.barrier_.arrive_and_wait();
  return s / g.world_;
}

}  // namespace moc
