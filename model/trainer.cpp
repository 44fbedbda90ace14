#include "model/trainer.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "model/grad_buckets.h"

namespace moc {

Trainer::Trainer(Transformer& model, const TrainConfig& cfg, Communicator* comm)
    : model_(&model), cfg_(cfg), comm_(comm) {
  Ops& o = model.ops();
  model.allocate_grads();
  auto& ps = model.params();
  if (comm_ != nullptr) {
    std::vector<std::size_t> order, bytes(ps.size());
    for (const auto& g : model.grad_ready_groups()) order.insert(order.end(), g.begin(), g.end());
    for (std::size_t i = 0; i < ps.size(); ++i) bytes[i] = ps[i].grad.nbytes();
    bucket_of_.resize(ps.size());
    for (const auto& b : plan_buckets(order, bytes, cfg_.bucket_bytes)) {
      for (std::size_t p : b.params) bucket_of_[p] = buckets_.size();
      buckets_.push_back(b.params);
    }
    owner_.assign(ps.size(), -1);
    if (cfg_.zero1) {
      std::vector<std::size_t> by_size(ps.size());
      for (std::size_t i = 0; i < ps.size(); ++i) by_size[i] = i;
      std::stable_sort(by_size.begin(), by_size.end(), [&](std::size_t a, std::size_t b) { return bytes[a] > bytes[b]; });
      std::vector<std::size_t> load(static_cast<std::size_t>(comm_->world()), 0);
      for (std::size_t p : by_size) {
        const auto r = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
        owner_[p] = static_cast<int>(r);
        load[r] += bytes[p];
      }
    }
    if (cfg_.overlap) model.set_grads_ready([this](const std::vector<std::size_t>& p) { grads_ready(p); });
  }
  const bool master = cfg.fp32_master && model.config().param_dtype != DType::f32;
  const DType state = master ? DType::f32 : model.config().param_dtype;
  const MemTag opt{MemCategory::optimizer_state};
  m_.resize(ps.size());
  v_.resize(ps.size());
  if (master) master_.resize(ps.size());
  for (std::size_t i = 0; i < ps.size(); ++i) {
    auto& p = ps[i];
    if (sharded() && owner_[i] != comm_->rank()) continue;  // another rank's state
    m_[i] = o.empty(p.value.shape(), state, opt);
    v_[i] = o.empty(p.value.shape(), state, opt);
    o.fill(m_[i], 0.0f);
    o.fill(v_[i], 0.0f);
    if (master) {
      master_[i] = o.empty(p.value.shape(), DType::f32, opt);
      o.copy(master_[i], p.value);
    }
    slots_.push_back({&p.value, &p.grad, &m_[i], &v_[i], master ? &master_[i] : nullptr, p.decay});
  }
  norm_acc_ = o.empty({1}, DType::f32, workspace_tag());
}

Trainer::~Trainer() {
  if (comm_ != nullptr && cfg_.overlap) model_->set_grads_ready({});
}

float Trainer::lr_at(int step) const {
  if (cfg_.warmup_steps > 0 && step <= cfg_.warmup_steps)
    return cfg_.lr * static_cast<float>(step) / static_cast<float>(cfg_.warmup_steps);
  const int decay_steps = std::max(1, cfg_.total_steps - cfg_.warmup_steps);
  const double t = std::min(1.0, static_cast<double>(step - cfg_.warmup_steps) / decay_steps);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * t));
  return cfg_.lr * static_cast<float>(cfg_.min_lr_ratio + (1.0 - cfg_.min_lr_ratio) * cosine);
}

void Trainer::grads_ready(const std::vector<std::size_t>& params) {
  for (std::size_t p : params) --pending_[bucket_of_[p]];
  start_ready_buckets();
}

void Trainer::start_ready_buckets() {
  auto& ps = model_->params();
  while (next_bucket_ < buckets_.size() && pending_[next_bucket_] == 0) {
    std::vector<CommItem> items;
    for (std::size_t p : buckets_[next_bucket_]) items.push_back({&ps[p].grad, owner_[p]});
    comm_->start(items);
    ++next_bucket_;
  }
}

StepResult Trainer::step(const Tensor& tokens, const Tensor& targets, int batch, int seq) {
  Ops& o = model_->ops();
  RangeSink* r = model_->ranges();
  ScopedRange step_range(r, "step");
  StepResult res;
  model_->zero_grads();
  if (comm_ != nullptr) {
    pending_.clear();
    for (const auto& b : buckets_) pending_.push_back(b.size());
    next_bucket_ = 0;
  }
  {
    ScopedRange sr(r, "forward");
    res.loss = model_->forward(tokens, targets, batch, seq, true);
  }
  {
    ScopedRange sr(r, "backward");
    model_->backward();
  }
  if (comm_ != nullptr) {
    ScopedRange sr(r, "allreduce");
    if (!cfg_.overlap) {
      std::fill(pending_.begin(), pending_.end(), 0);
      start_ready_buckets();
    }
    comm_->wait();
    res.loss = comm_->mean(res.loss);
  }
  ScopedRange sr(r, "optimizer");
  auto& ps = model_->params();
  o.fill(norm_acc_, 0.0f);
  for (std::size_t i = 0; i < ps.size(); ++i)
    if (!sharded() || owner_[i] == comm_->rank()) o.sum_squares(ps[i].grad, norm_acc_);
  double sq = o.download_f32(norm_acc_)[0];
  if (sharded()) sq = comm_->mean(sq) * comm_->world();  // each rank summed the gradients it owns
  res.grad_norm = static_cast<float>(std::sqrt(sq));
  ++step_;
  AdamWParams ap;
  ap.lr = res.lr = lr_at(step_);
  ap.beta1 = cfg_.beta1;
  ap.beta2 = cfg_.beta2;
  ap.eps = cfg_.eps;
  ap.weight_decay = cfg_.weight_decay;
  ap.step = step_;
  ap.grad_scale = (cfg_.clip_norm > 0 && res.grad_norm > cfg_.clip_norm) ? cfg_.clip_norm / res.grad_norm : 1.0f;
  o.adamw_step(slots_, ap);
  if (sharded()) {  // every rank takes each parameter from its owner
    std::vector<CommItem> items;
    for (std::size_t i = 0; i < ps.size(); ++i) items.push_back({&ps[i].value, owner_[i]});
    comm_->broadcast(items);
  }
  if (comm_ != nullptr) res.comm = comm_->take_times();
  return res;
}

}  // namespace moc
