// Training step: forward, backward, global-norm gradient clipping, AdamW (decoupled weight decay) with a
// linear warm-up then cosine decay to min_lr_ratio * lr.
#pragma once
#include <cstddef>
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
  // Data parallelism (with a communicator): gradients go out in buckets of about bucket_bytes as backward
  // finalizes them (overlap) or all after backward (!overlap, the baseline); zero1 shards the optimizer
  // state: each parameter's AdamW moments (and f32 master) live on one rank, its gradient is reduced to that
  // rank, which steps it and broadcasts the new value (ZeRO stage 1 at parameter granularity).
  std::size_t bucket_bytes = std::size_t{25} << 20;
  bool overlap = true;
  bool zero1 = false;
};

struct StepResult {
  double loss = 0;
  float grad_norm = 0;  // before clipping
  float lr = 0;
  CommTimes comm;  // data parallelism: the step's communication
};

class Trainer {
 public:
  // comm (not owned; null for one process): data-parallel training. After backward the gradients are the
  // mean over the ranks (so every rank clips and steps alike) and the loss the ranks' mean. Every rank must
  // feed batches of the same number of (non-ignored) target tokens, so the mean of their means is the
  // global mean. Parameters must start equal on every rank (the same seed, or the same checkpoint).
  Trainer(Transformer& model, const TrainConfig& cfg, Communicator* comm = nullptr);
  ~Trainer();  // detaches from the model's gradient hook
  Trainer(const Trainer&) = delete;  // the model's hook points at this object
  Trainer& operator=(const Trainer&) = delete;
  StepResult step(const Tensor& tokens, const Tensor& targets, int batch, int seq);
  float lr_at(int step) const;  // step is 1-based
  int steps_done() const { return step_; }
  // The optimizer's state, per parameter in Transformer::params() order (checkpoints): AdamW's m and v and,
  // with fp32_master, the f32 master weights; set_steps_done restores the schedule's position. With zero1
  // the parameters another rank owns have no state here (undefined tensors).
  std::vector<Tensor>& m_state() { return m_; }
  std::vector<Tensor>& v_state() { return v_; }
  std::vector<Tensor>& master_state() { return master_; }
  const std::vector<Tensor>& m_state() const { return m_; }
  const std::vector<Tensor>& v_state() const { return v_; }
  const std::vector<Tensor>& master_state() const { return master_; }
  bool has_master() const { return !master_.empty(); }
  void set_steps_done(int s) { step_ = s; }
  bool sharded() const { return comm_ != nullptr && cfg_.zero1; }
  // zero1: the rank that owns each parameter's optimizer state (largest first to the least loaded rank).
  const std::vector<int>& owners() const { return owner_; }
  std::size_t buckets() const { return buckets_.size(); }

 private:
  Transformer* model_;
  TrainConfig cfg_;
  int step_ = 0;
  Communicator* comm_ = nullptr;
  std::vector<Tensor> m_, v_, master_;
  std::vector<ParamSlot> slots_;
  Tensor norm_acc_;
  // Data parallelism: the bucket plan (model/grad_buckets.h), each parameter's bucket, the gradients still
  // to come per bucket this step, and the next bucket to start (buckets start in order on every rank).
  std::vector<std::vector<std::size_t>> buckets_;
  std::vector<std::size_t> bucket_of_, pending_;
  std::size_t next_bucket_ = 0;
  std::vector<int> owner_;
  void grads_ready(const std::vector<std::size_t>& params);
  void start_ready_buckets();
};

}  // namespace moc
