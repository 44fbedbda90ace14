// Training on real text (a scenario's [data] table): a corpus tokenized once (model/data/token_data.h),
// `steps` optimizer steps on shuffled windows with a warm-up + cosine learning rate, validation loss and
// perplexity on held-out documents every eval_every steps, the loss curve stored as time series, an
// optional checkpoint, then the analyses of the trained gates (model/activation_analysis.h). Decode points
// with [data] take their prompts from the validation documents and measure the channel union on them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace moc {

struct TextData {
  std::string corpus;          // a named corpus (python3.11-doc) or a directory; "" = random tokens
  std::string tokens;          // eval points: a file of the model's token ids (instead of corpus)
  double val_fraction = 0.05;  // documents held out for validation
  std::uint64_t seed = 0;      // the split, the tokenizer's sampling and the window order
  int steps = 200;             // optimizer steps (the learning-rate schedule's length)
  int stop_at = 0;             // stop after this many steps (0: steps), e.g. to resume in another job
  int eval_every = 0;          // validate every this many steps (0: steps / 10), and at 0 and the end
  int eval_windows = 0;        // validation windows per evaluation (0: all)
  double lr = 1e-3;            // peak learning rate
  int warmup = -1;             // warm-up steps (-1: steps / 20)
  double min_lr_ratio = 0.1;   // cosine decay to this fraction of lr
  double weight_decay = 0.0;
  std::string save;            // checkpoint written after training ("": none)
  std::string cache;           // token cache root ("": $MOCBENCH_DATA_CACHE, else .local/data)
  bool analyze = true;         // gate histograms, overlap and unions after training
  bool resume = false;         // [model] weights is a checkpoint with optimizer state: continue it to `steps`
  bool active() const { return !corpus.empty(); }
  bool operator==(const TextData&) const = default;
};

class Ops;
class Transformer;
struct ModelConfig;
struct PointSpec;
struct PointOutcome;

// A train point with [data]: the whole training run above; metrics and series into out.
void run_text_train(Ops& ops, const PointSpec& spec, const ModelConfig& cfg, PointOutcome& out);
// The validation split of [data]'s corpus (tokenized with mocbench's own tokenizer of `vocab` pieces, cached) as
// windows of `seq` tokens: what text training validates on, and what `eval` points with a corpus evaluate.
class EvalWindows {
 public:
  virtual ~EvalWindows() = default;
  virtual std::int64_t windows() const = 0;
  virtual void window(std::int64_t w, std::vector<std::int32_t>& inputs, std::vector<std::int32_t>& targets) const = 0;
};
std::unique_ptr<EvalWindows> validation_windows(const TextData& data, int vocab, int seq);

// Decode points with [data]: `batch` prompts of `prompt` tokens from different validation windows, and
// `follow` more tokens of each (the text that continues them), row-major [batch, prompt + follow].
std::vector<std::int32_t> validation_prompts(const TextData& data, int vocab, int batch, int prompt, int follow);

}  // namespace moc
