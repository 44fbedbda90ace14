// Training step: forward, backward, global-norm gradient clipping, AdamW (decoupled weight decay) with a
// linear warm-up then cosine decay to min_lr_ratio * lr.
#pragma once
#include <vector>

#include "kernels/comm.h"
#include "model/transformer.h"

namespace moc {

struct TrainConfig {
  float lr = 1e-3f;
  float min_lr_ratio = 0.1f;
  int warmup_steps = 10;
  int total_steps = 1000;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float clip_norm = 1.0f;  // <= 0: no clipping
  bool fp32_master = false;  // bf16 params with f32 master weights and states
};

struct StepResult {
  double loss = 0;
  float grad_norm = 0;  // before clipping
  float lr = 0;
};

class Trainer {
 public:
  Trainer(Transformer& model, const TrainConfig& cfg);
  StepResult step(const Tensor& tokens, const Tensor& targets, int batch, int seq);
  float lr_at(int step) const;  // step is 1-based
  int steps_done() const { return step_; }
  // The optimizer's state, per parameter in Transformer::params() order (checkpoints): AdamW's m and v and,
  // with fp32_master, the f32 master weights; set_steps_done restores the schedule's position.
  std::vector<Tensor>& m_state() { return m_; }
  std::vector<Tensor>& v_state() { return v_; }
  std::vector<Tensor>& master_state() { return master_; }
  const std::vector<Tensor>& m_state() const { return m_; }
  const std::vector<Tensor>& v_state() const { return v_; }
  const std::vector<Tensor>& master_state() const { return master_; }
  bool has_master() const { return !master_.empty(); }
  void set_steps_done(int s) { step_ = s; }
  // Data-parallel training (issue 15): after backward and before clipping, the gradients become the mean
  // over the ranks (so every rank clips and steps alike) and the loss the ranks' mean. Not owned; null for
  // one process. Every rank must feed batches of the same number of (non-ignored) target tokens, so the
  // mean of their means is the global mean.
  void set_communicator(Communicator* c) { comm_ = c; }

 private:
  Transformer* model_;
  TrainConfig cfg_;
  int step_ = 0;
  Communicator* comm_ = nullptr;
  std::vector<Tensor> m_, v_, master_;
  std::vector<ParamSlot> slots_;
  Tensor norm_acc_;
};

}  // namespace moc
