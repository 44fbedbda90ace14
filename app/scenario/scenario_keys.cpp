#include "app/scenario/scenario_keys.h"

#include <algorithm>
#include <array>

#include "app/scenario/scenario.h"
#include "model/config.h"

namespace moc {

namespace {

using P = ScenarioPoint;
using V = ScenarioValue;

int as_int(const V& v) { return static_cast<int>(v.i); }

const ScenarioKey kTop[] = {
    {"name", KeyRule::text, "\"decode_bs1_4\"", "the file name without `.toml`",
     "the study's name in the results store; plain text, no control characters (refused: `list` and `show` print "
     "it)"},
    {"description", KeyRule::text, "\"...\"", "\"\"", "one line for listings"},
    {"mode", KeyRule::mode, "\"decode\"", "(required unless `mode` is an axis)",
     "`train`, `decode`, `eval`, `ffn-train`, `ffn-decode` or `topk`; the default for points whose mode is not swept"},
    {"device", KeyRule::device, "\"auto\"", "auto", "`auto` (CUDA when a GPU is there, else the CPU), `cpu` or `cuda`"},
};

// [model]: the preset, a checkpoint, and every key of moc::apply_override (a test checks the list against
// moc::override_keys()).
const ScenarioKey kModel[] = {
    {"preset", KeyRule::preset, "\"1b\"", "(required unless `preset` is an axis or `weights` a published checkpoint)",
     "the base configuration the other keys change: {presets}"},
    {"weights", KeyRule::text, "\"model.safetensors\"", "random",
     "a checkpoint loaded into train, decode and eval points instead of random weights: mocbench's safetensors "
     "checkpoints (`model/checkpoint.h`; a checkpoint of another configuration fails its points with the tensor "
     "that differs), or a published checkpoint -- a GGUF file (llama architecture) or a Hugging Face folder "
     "(config.json + model.safetensors: Llama, Qwen3, Mixtral) -- whose configuration the points take (no "
     "`preset`; a key that shapes the network must agree with it; `ffn`, `k`, `gcp`, `select` on a dense "
     "checkpoint give training-free MoC). It must exist when the scenario is read (a relative path is taken "
     "from the current directory)"},
    {"vocab", KeyRule::pos_int, "32000", "preset", "vocabulary size (token ids)"},
    {"hidden", KeyRule::pos_int, "2048", "preset", "model width d"},
    {"d_ffn", KeyRule::pos_int, "5461", "preset", "FFN channels (the SwiGLU inner width; odd values are fine)"},
    {"heads", KeyRule::pos_int, "32", "preset", "attention heads (head_dim = hidden / heads)"},
    {"kv_heads", KeyRule::pos_int, "8", "preset", "key/value heads: fewer than `heads` is GQA (must divide `heads`)"},
    {"layers", KeyRule::pos_int, "4", "preset", "transformer layers"},
    {"seq_len", KeyRule::pos_int, "256", "preset",
     "positions the model holds; raised to cover the point (`seq`, or `prompt + generate` for `decode`)"},
    {"rope_theta", KeyRule::pos_number, "10000.0", "preset", "RoPE base"},
    {"norm_eps", KeyRule::pos_number, "1e-6", "preset", "RMSNorm epsilon"},
    {"init_std", KeyRule::pos_number, "0.02", "preset", "standard deviation of the random initial weights"},
    {"seed", KeyRule::nonneg_int, "1", "preset", "the random weights' and tokens' seed"},
    {"param_dtype", KeyRule::dtype, "\"bf16\"", "preset", "weights' type: `f32` (or `fp32`) or `bf16`"},
    {"act_dtype", KeyRule::dtype, "\"bf16\"", "preset", "activations' type: `f32` (or `fp32`) or `bf16`"},
    {"ffn", KeyRule::ffn, "\"moc_2:8\"", "preset",
     "`dense`, `moc` (row top-K) or `moc_a:b` (a kept out of every b channels, 0 < a <= b)"},
    {"k", KeyRule::k, "1024 (or 0.2, a fraction of d_ffn)", "preset",
     "MoC channels kept per row: an integer in [1, d_ffn] or a fraction of d_ffn in (0, 1] (of the final "
     "`d_ffn`: applied after the shape keys)"},
    {"gcp", KeyRule::boolean, "true", "preset",
     "gradient checkpointing of the FFN: S and Z recomputed in backward instead of stored"},
    {"select", KeyRule::select, "\"gate\"", "preset",
     "MoC's ranking: `gate` (the paper's rule), `silu` (the ablation), `abs_silu` (Theorem 1's rule); the "
     "axis of the same meaning is `topk_position`"},
    {"qk_norm", KeyRule::boolean, "true", "preset", "Qwen3-style RMSNorm on every head's q and k before RoPE"},
    {"experts", KeyRule::nonneg_int, "8", "preset",
     "Mixtral-style experts in place of each layer's FFN (0: one FFN); only `train` points"},
    {"experts_per_token", KeyRule::pos_int, "2", "preset", "experts each token is routed to"},
};

const ScenarioKey kMeasure[] = {
    {"warmup", KeyRule::nonneg_int, "3", "3", "untimed repetitions first (>= 0)",
     +[](P& p, const V& v) { p.measure.warmup = as_int(v); }},
    {"min_reps", KeyRule::pos_int, "5", "5", "timed repetitions, at least (<= `max_reps`)",
     +[](P& p, const V& v) { p.measure.min_reps = as_int(v); }},
    {"max_reps", KeyRule::pos_int, "100", "100", "... and at most",
     +[](P& p, const V& v) { p.measure.max_reps = as_int(v); }},
    {"time_bound_s", KeyRule::pos_number, "10.0", "10.0", "stop after this much timed work once `min_reps` are done",
     +[](P& p, const V& v) { p.measure.time_bound_s = v.f; }},
    {"target_noise", KeyRule::pos_number, "0.02", "0.02",
     "stop once the relative noise of the median falls below this (> 0); a point that reaches `max_reps` or "
     "`time_bound_s` first is stored with `noise_met = 0` and `show` marks its noise `!` (not final)",
     +[](P& p, const V& v) { p.measure.target_noise = v.f; }},
    {"cold", KeyRule::boolean, "true", "true",
     "cold timing, so that weights come from memory, not a warm cache. `ffn-decode`: each repetition rotates "
     "through copies of the layer's weights (more bytes than the L2); every other mode: the GPU's L2 is flushed "
     "before each repetition, outside its timing (a write of twice the L2; the CPU backend does not flush: its "
     "last-level cache, hundreds of MB on a server, would cost more than the work timed). A decode repetition "
     "is one step, a train / ffn-train repetition one optimizer step, a topk repetition one selection. false: "
     "repetitions run back to back, warm",
     +[](P& p, const V& v) { p.measure.cold = v.b; }},
    {"prompt", KeyRule::pos_int, "128", "128", "prompt tokens per sequence (`decode`)",
     +[](P& p, const V& v) { p.measure.prompt = as_int(v); }},
    {"generate", KeyRule::pos_int, "128", "128", "generated tokens per sequence (`decode`)",
     +[](P& p, const V& v) { p.measure.generate = as_int(v); }},
};

const ScenarioKey kProfile[] = {
    {"kernels", KeyRule::boolean, "true", "true",
     "profile each point (`mocbench run --no-profile` turns it off for a run)",
     +[](P& p, const V& v) { p.profile_kernels = v.b; }},
    {"steps", KeyRule::pos_int, "1", "1",
     "profiled repetitions (a training step, a decode step, one ffn-decode replay of calls_per_replay calls over "
     "its weight copies, a selection)",
     +[](P& p, const V& v) { p.profile_steps = as_int(v); }},
};

const ScenarioKey kData[] = {
    {"corpus", KeyRule::text, "\"python3.11-doc\"", "(required, or tokens)",
     "`python3.11-doc` (the Python 3.11 documentation sources, Debian's python3.11-doc, PSF licence; "
     "scripts/setup.sh installs it) or a directory of text files (each file a document)",
     +[](P& p, const V& v) { p.data.corpus = v.s; }},
    {"tokens", KeyRule::text, "\"ids.txt\"", "\"\"",
     "instead of `corpus`, for `eval` points: a file of the model's token ids, whitespace-separated "
     "(`scripts/tokenize_gguf.py MODEL OUT.txt TEXT...` writes one with a published checkpoint's own tokenizer); "
     "cut into windows of `seq` + 1 ids (as `mocbench eval --window` cuts them); a relative path is taken from "
     "the current directory",
     +[](P& p, const V& v) { p.data.tokens = v.s; }},
    {"val_fraction", KeyRule::pos_number, "0.05", "0.05", "share of the documents held out for validation, in (0, 1)",
     +[](P& p, const V& v) { p.data.val_fraction = v.f; }},
    {"seed", KeyRule::nonneg_int, "1", "0", "the split, the tokenizer's sampling and the window order",
     +[](P& p, const V& v) { p.data.seed = static_cast<std::uint64_t>(v.i); }},
    {"steps", KeyRule::pos_int, "200", "200", "optimizer steps: the learning-rate schedule's length",
     +[](P& p, const V& v) { p.data.steps = as_int(v); }},
    {"stop_at", KeyRule::nonneg_int, "100", "0", "stop after this many steps (0: `steps`), to continue later with `resume`",
     +[](P& p, const V& v) { p.data.stop_at = as_int(v); }},
    {"eval_every", KeyRule::nonneg_int, "100", "steps / 10", "steps between validations",
     +[](P& p, const V& v) { p.data.eval_every = as_int(v); }},
    {"eval_windows", KeyRule::nonneg_int, "0 (all)", "0",
     "validation windows per evaluation (0: all); `eval` points: the windows one repetition evaluates",
     +[](P& p, const V& v) { p.data.eval_windows = as_int(v); }},
    {"lr", KeyRule::pos_number, "0.001", "0.001",
     "AdamW's peak learning rate, after a linear warm-up, then cosine decay to `min_lr_ratio` x `lr`; gradients "
     "clipped to norm 1",
     +[](P& p, const V& v) { p.data.lr = v.f; }},
    {"warmup", KeyRule::nonneg_int, "10", "steps / 20", "warm-up steps of the learning rate",
     +[](P& p, const V& v) { p.data.warmup = as_int(v); }},
    {"min_lr_ratio", KeyRule::pos_number, "0.1", "0.1", "the cosine decay's end, a fraction of `lr` (<= 1)",
     +[](P& p, const V& v) { p.data.min_lr_ratio = v.f; }},
    {"weight_decay", KeyRule::nonneg_number, "0.1", "0", "AdamW's decoupled weight decay",
     +[](P& p, const V& v) { p.data.weight_decay = v.f; }},
    {"save", KeyRule::text, "\"ckpt/{ffn}.safetensors\"", "\"\"",
     "write a checkpoint (weights + optimizer state, safetensors) after training; `{axis}` placeholders take the "
     "point's values (`{preset}`, `{ffn}`, `{gcp}`, any axis; `{batch}`, `{seq}`, `{mode}`, `{precision}` also "
     "when not swept)",
     +[](P& p, const V& v) { p.data.save = v.s; }},
    {"resume", KeyRule::boolean, "true", "false",
     "continue the checkpoint `[model] weights` names (weights, optimizer state, step) to `steps`: the same "
     "batches, bit for bit what an uninterrupted run gives",
     +[](P& p, const V& v) { p.data.resume = v.b; }},
    {"cache", KeyRule::text, "\".local/data\"", "\"\"", "token cache directory (\"\": `$MOCBENCH_DATA_CACHE`, else `.local/data`)",
     +[](P& p, const V& v) { p.data.cache = v.s; }},
    {"analyze", KeyRule::boolean, "true", "true",
     "the gate analyses above after training; `eval` points with a MoC FFN: the same analyses of their selection "
     "on the first 8 windows",
     +[](P& p, const V& v) { p.data.analyze = v.b; }},
};

// [axes]: the study's own dimensions. Any model key is an axis too (scenario_parse.cpp's axis_keys()), except
// `select`, which is called topk_position here as in the paper's ablation.
const ScenarioKey kAxes[] = {
    {"mode", KeyRule::mode, "\"decode\"", "the top-level `mode`",
     "`train`, `decode`, `eval`, `ffn-train`, `ffn-decode`, `topk`"},
    {"batch", KeyRule::pos_int, "4", "1", "integers > 0 (per GPU when `gpus > 1`)"},
    {"seq", KeyRule::pos_int, "256", "the model's `seq_len`", "integers > 0"},
    {"preset", KeyRule::preset, "\"1b\"", "[model] preset", "preset names"},
    {"ffn", KeyRule::ffn, "\"moc_2:8\"", "[model] ffn", "`dense`, `moc` (row top-K), `moc_a:b` (a kept out of every b channels, 0 < a <= b)"},
    {"k", KeyRule::k, "1024 (or 0.2, a fraction of d_ffn)", "[model] k",
     "integers > 0 (absolute K, at most d_ffn) or fractions of d_ffn in (0, 1] (`0.2`; `1.0` is all channels)"},
    {"gcp", KeyRule::boolean, "true", "[model] gcp", "`false`, `true` (gradient checkpointing of the FFN)"},
    {"topk_position", KeyRule::select, "\"gate\"", "[model] select",
     "`gate` (the paper's rule), `silu` (the ablation), `abs_silu` (Theorem 1's rule)"},
    {"topk_backend", KeyRule::topk_backend, "\"own\"", "own", "`own`, `raft` (RAFT needs `scripts/setup_raft.sh`)"},
    {"decode_impl", KeyRule::decode_impl, "\"kernels\"", "kernels",
     "`kernels` (one kernel, or a few, per op, replayed as a CUDA graph; the only value). `persistent` (the whole "
     "step as one cooperative kernel) was retired, slower than `kernels` at every measured point "
     "(bench/RESULTS.md): a file that asks for it is refused at the value with that reason and the fix (`use "
     "\"kernels\" or remove the key`). Only `decode` and `ffn-decode` read it"},
    {"precision", KeyRule::precision, "\"bf16\"", "fp32 on the CPU, bf16 on CUDA", "`bf16`, `bf16-fp32master`, `fp32`"},
    {"gpus", KeyRule::pos_int, "2", "1",
     "data-parallel ranks for `train` points, one process per GPU (`batch` is per GPU; docs/multi-gpu.md). "
     "Refused above the GPUs the machine has, before any point runs; `--gpus N` sets it for every train point. "
     "On the CPU backend the ranks are processes meeting in shared memory (a check, not a measurement). Keep it "
     "the last axis: a point's scaling efficiency needs its `gpus = 1` twin to have run first. Not with `[data]`"},
    {"zero1", KeyRule::boolean, "true", "false",
     "with `gpus > 1`, shard the AdamW state (and fp32 master weights) over the ranks (ZeRO-1). Refused on "
     "`gpus = 1` points (exclude them)"},
    {"comm_overlap", KeyRule::boolean, "false", "true",
     "with `gpus > 1`, start each gradient bucket's all-reduce during backward (true) or all after it (false: "
     "the baseline). Refused as false on `gpus = 1` points"},
    {"weights", KeyRule::text, "\"random\"", "[model] weights",
     "`\"random\"` (the seed's random weights) or a checkpoint path, with `{axis}` placeholders as `[data] save` "
     "has: compares trained and random weights in one run (`train`, `decode`)"},
};

const RetiredKey kRetired[] = {
    {KeySection::measure, "steps",
     "[measure] steps was removed: it never changed what ran (a timed repetition of train and ffn-train is one "
     "optimizer step; how many repetitions run comes from min_reps, max_reps, time_bound_s and target_noise)",
     "remove the line; to train on real text for N steps, use [data] steps = N"},
};

std::string escape_cell(std::string s) {
  // A '|' would split the markdown cell.
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string doc_text(const ScenarioKey& k) {
  std::string d = k.doc;
  if (const auto at = d.find("{presets}"); at != std::string::npos) {
    std::string list;
    for (const auto& p : preset_names()) list += (list.empty() ? "`" : ", `") + p + "`";
    d.replace(at, 9, list);
  }
  return d;
}

}  // namespace

std::span<const ScenarioKey> scenario_keys(KeySection s) {
  switch (s) {
    case KeySection::top: return kTop;
    case KeySection::model: return kModel;
    case KeySection::measure: return kMeasure;
    case KeySection::profile: return kProfile;
    case KeySection::data: return kData;
    case KeySection::axes: return kAxes;
  }
  return {};
}

const ScenarioKey* find_scenario_key(KeySection s, std::string_view name) {
  for (const auto& k : scenario_keys(s))
    if (name == k.name) return &k;
  return nullptr;
}

std::vector<std::string> scenario_key_names(KeySection s) {
  std::vector<std::string> out;
  for (const auto& k : scenario_keys(s)) out.emplace_back(k.name);
  return out;
}

std::string_view section_name(KeySection s) {
  switch (s) {
    case KeySection::top: return "top";
    case KeySection::model: return "model";
    case KeySection::measure: return "measure";
    case KeySection::profile: return "profile";
    case KeySection::data: return "data";
    case KeySection::axes: return "axes";
  }
  return "";
}

bool parse_section(std::string_view name, KeySection* out) {
  for (KeySection s : kAllSections)
    if (name == section_name(s)) return *out = s, true;
  return false;
}

const RetiredKey* find_retired_key(KeySection s, std::string_view name) {
  for (const auto& r : kRetired)
    if (r.section == s && name == r.name) return &r;
  return nullptr;
}

std::string key_table_markdown(KeySection s) {
  std::string out = s == KeySection::axes ? "| axis | default | values |\n" : "| key | default | meaning |\n";
  out += "|---|---|---|\n";
  for (const auto& k : scenario_keys(s))
    out += "| `" + std::string(k.name) + "` | " + escape_cell(k.fallback) + " | " + escape_cell(doc_text(k)) + " |\n";
  if (s == KeySection::axes) out += "| any other model key | [model] | as in `[model]`, e.g. `layers = [1, 24]` |\n";
  return out;
}

}  // namespace moc
