#include "model/trainer.h"

#include <cmath>
#include <numbers>

namespace moc {

Trainer::Trainer(Transformer& model, const TrainConfig& cfg) : model_(&model), cfg_(cfg) {
  Ops& o = model.ops();
  model.allocate_grads();
  const bool master = cfg.fp32_master && model.config().param_dtype != DType::f32;
  const DType state = master ? DType::f32 : model.config().param_dtype;
  const MemTag opt{MemCategory::optimizer_state};
  auto& ps = model.params();
  m_.reserve(ps.size());
  v_.reserve(ps.size());
  master_.reserve(ps.size());
  for (auto& p : ps) {
    m_.push_back(o.empty(p.value.shape(), state, opt));
    v_.push_back(o.empty(p.value.shape(), state, opt));
    o.fill(m_.back(), 0.0f);
    o.fill(v_.back(), 0.0f);
    if (master) {
      master_.push_back(o.empty(p.value.shape(), DType::f32, opt));
      o.copy(master_.back(), p.value);
    }
  }
  for (std::size_t i = 0; i < ps.size(); ++i)
    slots_.push_back({&ps[i].value, &ps[i].grad, &m_[i], &v_[i], master ? &master_[i] : nullptr, ps[i].decay});
  norm_acc_ = o.empty({1}, DType::f32, workspace_tag());
}

float Trainer::lr_at(int step) const {
  if (cfg_.warmup_steps > 0 && step <= cfg_.warmup_steps)
    return cfg_.lr * static_cast<float>(step) / static_cast<float>(cfg_.warmup_steps);
  const int decay_steps = std::max(1, cfg_.total_steps - cfg_.warmup_steps);
  const double t = std::min(1.0, static_cast<double>(step - cfg_.warmup_steps) / decay_steps);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * t));
  return cfg_.lr * static_cast<float>(cfg_.min_lr_ratio + (1.0 - cfg_.min_lr_ratio) * cosine);
}

StepResult Trainer::step(const Tensor& tokens, const Tensor& targets, int batch, int seq) {
  Ops& o = model_->ops();
  RangeSink* r = model_->ranges();
  ScopedRange step_range(r, "step");
  StepResult res;
  model_->zero_grads();
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
    std::vector<Tensor*> grads;
    for (auto& p : model_->params()) grads.push_back(&p.grad);
    comm_->all_reduce_mean(grads);
    res.loss = comm_->mean(res.loss);
  }
  ScopedRange sr(r, "optimizer");
  o.fill(norm_acc_, 0.0f);
  for (const auto& p : model_->params()) o.sum_squares(p.grad, norm_acc_);
  res.grad_norm = std::sqrt(o.download_f32(norm_acc_)[0]);
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
  return res;
}

}  // namespace moc
