#include "kernels/local_comm.h"

#include <chrono>

namespace moc {

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

LocalCommGroup::LocalCommGroup(int world)
    : world_(world), barrier_(world), values_(static_cast<std::size_t>(world)), scalars_(static_cast<std::size_t>(world)) {}

void LocalCommunicator::reduce_mean(const std::vector<Tensor*>& tensors, int root) {
  const double t0 = now_ms();
  auto& g = *group_;
  auto& mine = g.values_[static_cast<std::size_t>(rank_)];
  mine.clear();
  for (Tensor* t : tensors) {
    mine.push_back(ops_->download_f32(*t));
    times_.bytes += static_cast<double>(t->nbytes());
  }
  g.barrier_.arrive_and_wait();  // every rank's values are in
  if (root < 0 || root == rank_)
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
  const double dt = now_ms() - t0;
  times_.busy_ms += dt;
  times_.exposed_ms += dt;
  ++times_.calls;
}

void LocalCommunicator::broadcast(const std::vector<CommItem>& items) {
  auto& g = *group_;
  auto& mine = g.values_[static_cast<std::size_t>(rank_)];
  mine.clear();
  for (const auto& it : items) mine.push_back(it.root == rank_ ? ops_->download_f32(*it.tensor) : std::vector<float>{});
  g.barrier_.arrive_and_wait();
  for (std::size_t i = 0; i < items.size(); ++i)
    if (items[i].root != rank_) ops_->upload_f32(*items[i].tensor, g.values_[static_cast<std::size_t>(items[i].root)][i]);
  g.barrier_.arrive_and_wait();
}

std::vector<double> LocalCommunicator::all_gather(const std::vector<double>& values) {
  auto& g = *group_;
  g.scalars_[static_cast<std::size_t>(rank_)] = values;
  g.barrier_.arrive_and_wait();
  std::vector<double> out;
  for (const auto& v : g.scalars_) out.insert(out.end(), v.begin(), v.end());
  g.barrier_.arrive_and_wait();
  return out;
}

}  // namespace moc
