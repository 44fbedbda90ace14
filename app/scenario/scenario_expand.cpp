// A scenario's sweep: this backend's view of the tables (overrides), the settings every point starts from, the
// raw points (axes, exclude, include), each resolved into a ScenarioPoint and checked.
#include "app/scenario/scenario.h"

#include "app/scenario/scenario_detail.h"
#include "app/scenario/scenario_keys.h"

#include "model/data/corpus.h"
#include "model/published.h"
#include "model/token_ids.h"
#include "model/data/tokenizer.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_set>

namespace moc {

using namespace scenario_detail;

namespace {

// Model keys applied after every other model key, in this order: a fractional k needs the final d_ffn,
// and ffn resets the a:b grouping that k does not touch.
const std::vector<std::string> kLateModelKeys = {"ffn", "k", "gcp", "select"};

// Scenario::expand in stages: this backend's view of the tables, the settings every point starts from, the
// raw points of the sweep, then each point resolved and checked.
class Expander {
 public:
  Expander(const Scenario& sc, const std::string& backend, std::vector<AppliedOverride>* applied)
      : sc_(sc), path_(sc.path), backend_(backend), applied_(applied) {}

  std::vector<ScenarioPoint> run() {
    merge_overrides();
    apply_settings();
    bound_sweep();
    const std::vector<RawPoint> raw = raw_points();
    for (const auto& s : mdl_)
      if (s.key == "preset") preset_setting_ = &s;
    std::vector<ScenarioPoint> points;
    for (std::size_t idx = 0; idx < raw.size(); ++idx) points.push_back(resolve(idx, raw[idx]));
    check_data_keys_used(points);
    return points;
  }

 private:
  // The model keys a point sets (file order, last write wins) and their values.
  using ModelKeys = std::vector<std::pair<std::string, const ScenarioValue*>>;

  // One point being resolved: its raw values, the text that names it in messages, where to point.
  struct At {
    const RawPoint& rp;
    std::string context;
    SourcePos here;
    const ScenarioValue* preset = nullptr;
    ModelKeys keys;
    SourcePos model_pos(const std::string& key) const {
      for (const auto& [k, v] : keys)
        if (k == key) return v->pos;
      return preset->pos;
    }
  };

  void report(const char* section, const std::string& key, const std::string& value) {
    if (applied_) applied_->push_back({section, key, value});
  }

  // This backend's view of the tables: override settings replace same-named ones in place.
  void merge_overrides() {
    ax_ = sc_.axes;
    mdl_ = sc_.model, meas_ = sc_.measure, dat_ = sc_.data;
    auto merge = [](std::vector<ScenarioSetting>& into, const ScenarioSetting& s) {
      for (auto& x : into)
        if (x.key == s.key) return void(x = s);
      into.push_back(s);
    };
    for (const auto& ov : sc_.overrides) {
      if (ov.backend != backend_) continue;
      for (const auto& s : ov.model) merge(mdl_, s), report("model", s.key, s.value.text);
      for (const auto& s : ov.data) merge(dat_, s), report("data", s.key, s.value.text);
      for (const auto& s : ov.measure) {
        // Moved to the end rather than replaced in place: the order tells which of min_reps/max_reps to blame.
        meas_.erase(std::remove_if(meas_.begin(), meas_.end(), [&](const auto& x) { return x.key == s.key; }),
                    meas_.end());
        meas_.push_back(s);
        report("measure", s.key, s.value.text);
      }
      for (const auto& a : ov.axes) {
        for (auto& x : ax_)
          if (x.name == a.name) x.values = a.values;
        report("axes", a.name, values_text(a.values));
      }
    }
  }

  // [measure], [profile] and [data] settings apply through their key table (app/scenario/scenario_keys.h) to a base
  // point that every point starts from.
  void apply_settings() {
    auto apply_setting = [&](KeySection sec, const ScenarioSetting& s) { key_spec(sec, s.key).apply(base_, s.value); };
    for (const auto& ps : sc_.profile) apply_setting(KeySection::profile, ps);
    const ScenarioSetting *min_set = nullptr, *max_set = nullptr;
    std::size_t min_at = 0, max_at = 0;
    for (std::size_t i = 0; i < meas_.size(); ++i) {
      const auto& s = meas_[i];
      apply_setting(KeySection::measure, s);
      if (s.key == "min_reps") min_set = &s, min_at = i;
      if (s.key == "max_reps") max_set = &s, max_at = i;
    }
    const Measurement& m = base_.measure;
    if (m.min_reps > m.max_reps) {
      // Blame whichever of the two was written last (an override, when one made them clash).
      const ScenarioSetting* blame = !max_set || (min_set && min_at > max_at) ? min_set : max_set;
      const SourcePos p = blame ? blame->value.pos : SourcePos{};
      fail(path_, p,
           "min_reps (" + std::to_string(m.min_reps) + ") exceeds max_reps (" + std::to_string(m.max_reps) +
               ") for backend " + backend_,
           "raise max_reps or lower min_reps (defaults: min_reps 5, max_reps 100)");
    }

    // [data] (this backend's view): one TextData for every point, placeholders filled in per point.
    for (const auto& st : dat_) {
      const auto& v = st.value;
      // Bounds the key rules do not state (a fraction below 1, a ratio at most 1).
      if (st.key == "val_fraction" && v.f >= 1)
        fail(path_, v.pos, "val_fraction must be below 1, got " + v.text, "e.g. val_fraction = 0.05");
      if (st.key == "min_lr_ratio" && v.f > 1)
        fail(path_, v.pos, "min_lr_ratio must be at most 1, got " + v.text, "e.g. min_lr_ratio = 0.1");
      apply_setting(KeySection::data, st);
      if (st.key == "corpus") corpus_value_ = &v;
      if (st.key == "tokens") tokens_value_ = &v;
      if (st.key == "save") save_value_ = &v;
    }
    if (corpus_value_ && tokens_value_)
      fail(path_, tokens_value_->pos, "[data] has both corpus and tokens",
           "corpus is text mocbench tokenizes itself (training, and eval of checkpoints trained here); tokens are "
           "ids a published checkpoint's own tokenizer wrote (eval points): keep one");
    if (!dat_.empty() && !corpus_value_ && !tokens_value_)
      fail(path_, sc_.data_pos, "[data] has no corpus",
           "name the text to train on: corpus = \"python3.11-doc\" (Debian's python3.11-doc, installed by "
           "scripts/setup.sh) or a directory of text files; or, for eval points, tokens = \"ids.txt\"");
    if (tokens_value_) {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(base_.data.tokens, ec))
        fail(path_, tokens_value_->pos, "[data] tokens: no file '" + base_.data.tokens + "'",
             base_.data.tokens.find(".local/smollm2/") != std::string::npos
                 ? "scripts/setup_real_model.sh fetches SmolLM2 and writes these ids; run from the repository root "
                   "(a relative path is taken from the current directory)"
                 : "a file of whitespace-separated token ids (scripts/tokenize_gguf.py MODEL OUT.txt TEXT writes one "
                   "with the model's own tokenizer); a relative path is taken from the current directory");
    }
    if (corpus_value_) {
      try {
        (void)data::resolve_corpus(base_.data.corpus);
      } catch (const data::DataError& e) {
        fail(path_, corpus_value_->pos, std::string("[data] ") + e.what(),
             "run scripts/setup.sh, or give a directory of text files");
      }
    }
  }

  // The sweep's size is bounded before anything is built: a few long axes in a 1 KiB file would otherwise
  // ask for billions of points (and the memory to hold them) before the run could refuse them.
  void bound_sweep() const {
    double product = 1;  // a double: no overflow, exact far beyond any count worth printing
    const ScenarioAxis* longest = nullptr;
    for (const auto& a : ax_) {
      product *= static_cast<double>(a.values.size());
      if (!longest || a.values.size() > longest->values.size()) longest = &a;
    }
    if (product <= static_cast<double>(kMaxSweepPoints)) return;
    char count[64];
    std::snprintf(count, sizeof count, "%.0f", product);
    fail(path_, longest->pos,
         std::string("the sweep has ") + count + " points for backend " + backend_ +
             " (the product of the axes' lengths, before [[exclude]]); at most " + std::to_string(kMaxSweepPoints) +
             " are allowed",
         "shorten the axes (the longest, '" + longest->name + "', has " + std::to_string(longest->values.size()) +
             " values) or split the study into several scenarios");
  }

  bool excluded(const RawPoint& p) const {
    for (const auto& ex : sc_.exclude) {
      bool all = true;
      for (const auto& cond : ex) {
        const ScenarioValue* v = find_value(p, cond.name);
        all = all && v && std::any_of(cond.values.begin(), cond.values.end(), [&](const ScenarioValue& c) {
                return c.text == v->text;
              });
      }
      if (all) return true;
    }
    return false;
  }

  // The cartesian product (first axis slowest) less the excludes, then the includes; duplicates dropped.
  std::vector<RawPoint> raw_points() const {
    std::vector<RawPoint> raw;
    std::vector<std::size_t> at(ax_.size(), 0);
    for (;;) {
      RawPoint p;
      for (std::size_t i = 0; i < ax_.size(); ++i) p.emplace_back(ax_[i].name, &ax_[i].values[at[i]]);
      if (!excluded(p)) raw.push_back(std::move(p));
      std::size_t i = ax_.size();
      while (i > 0 && ++at[i - 1] == ax_[i - 1].values.size()) at[--i] = 0;
      if (i == 0) break;
    }
    // Includes: the declared axes at their first value, overwritten by the entry, then its other keys.
    for (const auto& inc : sc_.include) {
      RawPoint p;
      for (const auto& a : ax_) p.emplace_back(a.name, &a.values.front());
      for (const auto& s : inc) {
        auto it = std::find_if(p.begin(), p.end(), [&](const auto& x) { return x.first == s.key; });
        if (it != p.end())
          it->second = &s.value;
        else
          p.emplace_back(s.key, &s.value);
      }
      raw.push_back(std::move(p));
    }
    std::set<std::string> seen;
    std::vector<RawPoint> unique;
    for (auto& p : raw)
      if (seen.insert(raw_key(p)).second) unique.push_back(std::move(p));
    return unique;
  }

  ScenarioPoint resolve(std::size_t idx, const RawPoint& rp) {
    ScenarioPoint pt;
    pt.index = static_cast<int>(idx);
    for (const auto& [n, v] : rp) pt.axes.emplace_back(n, v->text);
    // Where to point for a problem no single key of this point owns: the point's first value.
    At at{rp, " (backend " + backend_ + ", point #" + std::to_string(idx) + (rp.empty() ? "" : ": " + raw_text(rp)) + ")",
          !rp.empty() ? rp.front().second->pos : SourcePos{1, 1}, nullptr, {}};
    if (const ScenarioValue* v = find_value(rp, "mode"))
      pt.mode = v->text;
    else if (sc_.mode)
      pt.mode = sc_.mode->text;
    else
      fail(path_, at.here, "no mode" + at.context,
           "set mode = \"decode\" at the top level or sweep [axes] mode = [...]; modes: " + join(scenario_modes()));
    resolve_model(pt, at);
    pt.measure = base_.measure;
    pt.profile_kernels = base_.profile_kernels;
    pt.profile_steps = base_.profile_steps;
    if (const ScenarioValue* v = find_value(rp, "batch")) pt.batch = static_cast<int>(v->i);
    pt.seq = pt.model.seq_len;
    if (const ScenarioValue* v = find_value(rp, "seq")) pt.seq = static_cast<int>(v->i);
    fit_and_validate(pt, at);
    if (const ScenarioValue* v = find_value(rp, "topk_backend")) pt.topk_backend = v->text;
    if (const ScenarioValue* v = find_value(rp, "decode_impl")) pt.decode_impl = v->text;
    pt.precision = backend_ == "cpu" ? "fp32" : "bf16";
    if (const ScenarioValue* v = find_value(rp, "precision")) pt.precision = v->text;
    // What the engine cannot run is refused here, before any point runs.
    resolve_weights_and_data(pt, at);
    resolve_parallel(pt, at);
    if (pt.model.moe() && pt.mode != "train")
      fail(path_, at.model_pos("experts"),
           "a mixture-of-experts model (" + std::to_string(pt.model.experts) + " experts) runs in mode train only, not " +
               pt.mode + at.context,
           "the router groups tokens per expert on the host, which the decode step's captured graph cannot do; "
           "use mode = \"train\", or experts = 0 (a dense-FFN model) for " + pt.mode);
    return pt;
  }

  // The preset (the point's axis, else [model]), then [model] keys (with this backend's overrides), then the
  // point's own model axes; shape keys before kLateModelKeys.
  void resolve_model(ScenarioPoint& pt, At& at) {
    at.preset = find_value(at.rp, "preset");
    if (!at.preset && preset_setting_) at.preset = &preset_setting_->value;
    const ScenarioValue* published = published_weights(at);
    if (published) {
      // A published checkpoint (GGUF, Hugging Face) brings its configuration: no preset, and the keys that
      // shape the network must agree with it (checked below); the FFN variant, dtypes and seq_len are choices.
      if (at.preset)
        fail(path_, at.preset->pos,
             "preset = " + at.preset->text + " beside a published checkpoint ([model] weights = " + published->text +
                 ")" + at.context,
             "drop preset: the configuration comes from the checkpoint");
      pt.model = published_config(*published);
      at.preset = published;  // problems with the base configuration point at the checkpoint
    } else {
      if (!at.preset)
        fail(path_, at.here, "no model preset" + at.context,
             "set [model] preset = \"1b\" or sweep [axes] preset = [...]; presets: " + join(preset_names()) +
                 "; or [model] weights = a GGUF file or Hugging Face folder, whose configuration is used");
      try {
        pt.model = preset(at.preset->text);
      } catch (const ConfigError& e) {
        fail(path_, at.preset->pos, e.what(), "presets: " + join(preset_names()));
      }
    }
    auto set_key = [&](const std::string& k, const ScenarioValue* v) {
      for (auto& x : at.keys)
        if (x.first == k) return void(x.second = v);
      at.keys.emplace_back(k, v);
    };
    for (const auto& s : mdl_)
      if (s.key != "weights" && s.key != "preset") set_key(s.key, &s.value);
    for (const auto& [n, v] : at.rp)
      if (auto mk = model_key_of_axis(n); !mk.empty()) set_key(mk, v);
    auto apply = [&](const std::string& k, const ScenarioValue* v) {
      if (published) check_agrees(pt.model, k, *v, *published, at);
      try {
        apply_override(pt.model, k, v->text);
      } catch (const ConfigError& e) {
        auto [msg, hint] = split_hint(e.what());
        fail(path_, v->pos, msg + at.context, hint.empty() ? "e.g. " + example_of(KeySection::model, k) : hint);
      }
    };
    for (const auto& [k, v] : at.keys)
      if (!contains(kLateModelKeys, k)) apply(k, v);
    for (const auto& late : kLateModelKeys)
      for (const auto& [k, v] : at.keys)
        if (k == late) apply(k, v);
  }

  // [data] keys that change nothing for this scenario's points are refused: training's keys without a train
  // point, and the corpus's (split, cache) beside tokens.
  void check_data_keys_used(const std::vector<ScenarioPoint>& points) const {
    static const std::vector<std::string> training = {"steps", "stop_at", "eval_every", "lr", "warmup", "min_lr_ratio",
                                                      "weight_decay", "save", "resume"};
    static const std::vector<std::string> corpus_only = {"val_fraction", "cache"};
    const bool trains = std::any_of(points.begin(), points.end(),
                                    [](const ScenarioPoint& p) { return p.mode == "train" && p.data.active(); });
    for (const auto& st : dat_) {
      if (tokens_value_ && (contains(training, st.key) || contains(corpus_only, st.key)))
        fail(path_, st.value.pos, "[data] " + st.key + " applies to training on a corpus; with tokens it changes nothing",
             "drop it (tokens feed eval points: tokens, eval_windows, analyze and seed apply)");
      if (!trains && contains(training, st.key))
        fail(path_, st.value.pos, "[data] " + st.key + " applies to train points; this scenario has none",
             "drop it, or add train points");
    }
  }

  // [data] tokens, read once (model/token_ids.h): how many ids and the largest; a file that is not ids is
  // refused where tokens is written.
  struct TokenFileFacts {
    std::size_t count = 0;
    long long max_id = -1;
  };
  const TokenFileFacts& token_file_facts() {
    if (token_facts_) return *token_facts_;
    TokenFileFacts f;
    try {
      const std::vector<std::int32_t> ids = read_token_ids(base_.data.tokens);
      f.count = ids.size();
      for (auto id : ids) f.max_id = std::max<long long>(f.max_id, id);
    } catch (const ConfigError& e) {
      fail(path_, tokens_value_->pos, std::string("[data] tokens: ") + e.what(),
           "the file holds whitespace-separated non-negative integers (scripts/tokenize_gguf.py writes them)");
    }
    return *(token_facts_ = f);
  }

  // The point's weights (its axis, else [model]) when they name a published checkpoint: a literal path to a
  // GGUF file or a Hugging Face folder (a path with placeholders names mocbench checkpoints a run writes).
  const ScenarioValue* published_weights(const At& at) const {
    const ScenarioValue* w = find_value(at.rp, "weights");
    if (!w)
      for (const auto& s : mdl_)
        if (s.key == "weights") w = &s.value;
    if (!w || w->s.empty() || w->s == "random" || w->s.find('{') != std::string::npos) return nullptr;
    return is_published_checkpoint(w->s) ? w : nullptr;
  }

  // The checkpoint's configuration, read once per file (a GGUF's metadata, a folder's config.json).
  ModelConfig published_config(const ScenarioValue& w) {
    if (const auto it = published_.find(w.s); it != published_.end()) return it->second;
    try {
      return published_.emplace(w.s, PublishedCheckpoint::open(w.s).config()).first->second;
    } catch (const ConfigError& e) {
      auto [msg, hint] = split_hint(e.what());
      fail(path_, w.pos, "[model] weights: " + msg,
           hint.empty() ? "a GGUF file (llama architecture) or a Hugging Face folder mocbench reads (Llama, Qwen3, "
                          "Mixtral)" : hint);
    }
  }

  // A key that shapes the network must agree with the published checkpoint's value; init_std has no effect on
  // loaded weights. The FFN variant (ffn, k, gcp, select), dtypes, seq_len and seed are the scenario's.
  void check_agrees(const ModelConfig& cfg, const std::string& k, const ScenarioValue& v, const ScenarioValue& w,
                    const At& at) const {
    static const std::vector<std::string> chosen = {"seq_len", "seed", "param_dtype", "act_dtype", "ffn", "k", "gcp",
                                                    "select"};
    if (contains(chosen, k)) return;
    if (k == "init_std")
      fail(path_, v.pos, "init_std = " + v.text + " beside a published checkpoint" + at.context,
           "drop it: the weights come from " + w.s + ", not from a random initialisation");
    ModelConfig changed = cfg;
    try {
      apply_override(changed, k, v.text);
    } catch (const ConfigError&) {
      return;  // an invalid value: apply() says why
    }
    const std::string was = cfg.describe() + " " + std::to_string(cfg.rope_theta) + " " + std::to_string(cfg.norm_eps) +
                            " " + std::to_string(cfg.qk_norm) + " " + std::to_string(cfg.experts_per_token);
    const std::string now = changed.describe() + " " + std::to_string(changed.rope_theta) + " " +
                            std::to_string(changed.norm_eps) + " " + std::to_string(changed.qk_norm) + " " +
                            std::to_string(changed.experts_per_token);
    if (was != now || changed.vocab != cfg.vocab || changed.kv_heads != cfg.kv_heads)
      fail(path_, v.pos,
           k + " = " + v.text + " disagrees with the published checkpoint " + w.s + " (" + cfg.describe() + ")" +
               at.context,
           "drop it: a published checkpoint's architecture comes from the checkpoint; the scenario chooses ffn, k, "
           "gcp, select, seq_len and the dtypes");
  }

  // The model must hold every position the point runs through (as `mocbench smoke` does); then validated,
  // a problem blamed on the key that set the field.
  void fit_and_validate(ScenarioPoint& pt, const At& at) const {
    const Measurement& m = base_.measure;
    const long need = pt.mode == "decode" ? static_cast<long>(m.prompt) + m.generate : pt.seq;
    if (need > INT_MAX) fail(path_, at.here, "prompt + generate is too large" + at.context, "lower prompt or generate");
    pt.model.seq_len = std::max(pt.model.seq_len, static_cast<int>(need));
    try {
      pt.model.validate();
    } catch (const ConfigError& e) {
      auto [msg, hint] = split_hint(e.what());
      SourcePos p = at.preset->pos;
      bool found = false;
      for (const auto& field : blame_candidates(msg)) {
        for (const auto& [k, v] : at.keys)
          if (k == field && !found) p = v->pos, found = true;
      }
      fail(path_, p, msg + at.context, hint.empty() ? "change this value or the model keys it depends on" : hint);
    }
  }

  // {name} in weights and [data] save: the point's value of axis `name` (or of preset, batch, seq, mode,
  // precision when they are not swept).
  std::string fill(const ScenarioPoint& pt, const At& at, const ScenarioValue& v, const char* what) const {
    std::string out;
    for (std::size_t i = 0; i < v.s.size(); ++i) {
      if (v.s[i] != '{') {
        out += v.s[i];
        continue;
      }
      const auto close = v.s.find('}', i);
      if (close == std::string::npos)
        fail(path_, v.pos, std::string(what) + ": '{' without '}'", "placeholders look like {ffn}");
      const std::string key = v.s.substr(i + 1, close - i - 1);
      if (const ScenarioValue* av = find_value(at.rp, key)) out += av->text;
      else if (key == "preset") out += at.preset->text;
      else if (key == "mode") out += pt.mode;
      else if (key == "batch") out += std::to_string(pt.batch);
      else if (key == "seq") out += std::to_string(pt.seq);
      else if (key == "precision") out += pt.precision;
      else
        fail(path_, v.pos, std::string(what) + ": unknown placeholder {" + key + "}" + at.context,
             "use an axis of the scenario (" + join(sc_.axis_names()) + ") or preset, mode, batch, seq, precision");
      i = close;
    }
    return out;
  }

  void resolve_weights_and_data(ScenarioPoint& pt, const At& at) {
    const ScenarioValue* weights = nullptr;
    for (const auto& s : mdl_)
      if (s.key == "weights") weights = &s.value;
    if (const ScenarioValue* v = find_value(at.rp, "weights")) weights = v;  // a weights axis: per point
    if (weights && (weights->s.empty() || weights->s == "random")) weights = nullptr;
    if (weights) {
      if (pt.mode != "train" && pt.mode != "decode" && pt.mode != "eval")
        fail(path_, weights->pos, "[model] weights apply to train, decode and eval points, not " + pt.mode + at.context,
             "drop weights for this mode, or exclude its points");
      pt.weights = fill(pt, at, *weights, "[model] weights");
      // A path with placeholders usually names checkpoints another scenario writes ([data] save): it is
      // checked when a run starts, before any point, rather than whenever the scenario is read.
      pt.weights_deferred = weights->s.find('{') != std::string::npos;
      std::error_code ec;
      if (!pt.weights_deferred && !std::filesystem::is_regular_file(pt.weights, ec) && !is_published_checkpoint(pt.weights))
        fail(path_, weights->pos, "[model] weights: no file '" + pt.weights + "'",
             pt.weights.find(".local/smollm2/") != std::string::npos
                 ? "scripts/setup_real_model.sh fetches SmolLM2 (~93 MB) and writes the held-out ids; run from the "
                   "repository root (a relative path is taken from the current directory)"
                 : "a safetensors checkpoint (mocbench's save_checkpoint, or [data] save), a GGUF file or a Hugging "
                   "Face folder (config.json + model.safetensors); a relative path is taken from the current "
                   "directory");
    }
    if (tokens_value_) {
      if (pt.mode != "eval")
        fail(path_, tokens_value_->pos, "[data] tokens feed eval points, not " + pt.mode + at.context,
             "train and decode on text take corpus; exclude this mode's points or drop tokens");
      pt.data = base_.data;
      const TokenFileFacts& f = token_file_facts();
      if (f.max_id >= pt.model.vocab)
        fail(path_, tokens_value_->pos,
             "[data] tokens: " + pt.data.tokens + " holds id " + std::to_string(f.max_id) + ", outside the model's " +
                 std::to_string(pt.model.vocab) + " ids" + at.context,
             "tokenize the text with this model's tokenizer (scripts/tokenize_gguf.py MODEL OUT.txt TEXT)");
      if (static_cast<long long>(f.count) < static_cast<long long>(pt.seq) + 1)
        fail(path_, tokens_value_->pos,
             "[data] tokens: " + pt.data.tokens + " holds " + std::to_string(f.count) + " ids, not one window of seq + 1 = " +
                 std::to_string(pt.seq + 1) + at.context,
             "lower seq, or give more text");
      return;
    }
    if (!corpus_value_) return;
    if (pt.mode != "train" && pt.mode != "decode" && pt.mode != "eval")
      fail(path_, sc_.data_pos, "[data] applies to train, decode and eval points, not " + pt.mode + at.context,
           "drop [data], or exclude this mode's points");
    if (pt.model.vocab < data::kMinVocab)
      fail(path_, at.model_pos("vocab"),
           "[data] trains a tokenizer of the model's vocabulary, " + std::to_string(pt.model.vocab) +
               " ids; it needs at least " + std::to_string(data::kMinVocab) + at.context,
           "set [model] vocab = 512 (or more) for small models");
    pt.data = base_.data;
    if (pt.data.resume && pt.mode == "train" && pt.weights.empty())
      fail(path_, sc_.data_pos, "[data] resume = true needs [model] weights: the checkpoint to continue" + at.context,
           "set [model] weights = \"ckpt.safetensors\" (a checkpoint [data] save wrote), or drop resume");
    if (save_value_) {
      if (pt.mode != "train")
        fail(path_, save_value_->pos,
             "[data] save writes a checkpoint after training; a " + pt.mode + " point has none" + at.context,
             "exclude non-train points or drop save");
      pt.data.save = fill(pt, at, *save_value_, "[data] save");
    }
  }

  void resolve_parallel(ScenarioPoint& pt, const At& at) const {
    if (const ScenarioValue* v = find_value(at.rp, "gpus")) {
      pt.gpus = static_cast<int>(v->i);
      if (pt.gpus > 1 && pt.mode != "train")
        fail(path_, v->pos, "gpus = " + v->text + ": data parallelism is for train points, not " + pt.mode + at.context,
             "use gpus = 1 for this mode, or exclude its points");
      if (pt.gpus > 1 && pt.data.active())
        fail(path_, v->pos, "gpus = " + v->text + ": training on [data] text runs on one GPU (data-parallel text "
             "training is not built)" + at.context, "use gpus = 1 with [data], or drop [data] to measure throughput");
    }
    for (const char* key : {"zero1", "comm_overlap"})
      if (const ScenarioValue* v = find_value(at.rp, key)) {
        (std::string(key) == "zero1" ? pt.zero1 : pt.comm_overlap) = v->b;
        if (pt.gpus == 1 && (std::string(key) == "zero1" ? v->b : !v->b))
          fail(path_, v->pos, std::string(key) + " = " + v->text + " applies to data-parallel points (gpus > 1); this one "
               "has gpus = 1" + at.context, "exclude it: [[exclude]] gpus = 1, " + std::string(key) + " = " + v->text);
      }
  }

  const Scenario& sc_;
  const std::string& path_;
  const std::string& backend_;
  std::vector<AppliedOverride>* applied_;
  std::vector<ScenarioAxis> ax_;
  std::vector<ScenarioSetting> mdl_, meas_, dat_;
  ScenarioPoint base_;
  const ScenarioValue *corpus_value_ = nullptr, *tokens_value_ = nullptr, *save_value_ = nullptr;
  std::map<std::string, ModelConfig> published_;  // published checkpoints' configurations by path
  std::optional<TokenFileFacts> token_facts_;
  const ScenarioSetting* preset_setting_ = nullptr;
};

}  // namespace

std::vector<ScenarioPoint> Scenario::expand(const std::string& backend, std::vector<AppliedOverride>* applied) const {
  if (!contains(scenario_backends(), backend))
    throw ScenarioError(path, 0, 0, "unknown backend '" + backend + "'", "backends: " + join(scenario_backends()));
  if (applied) applied->clear();
  return Expander(*this, backend, applied).run();
}

}  // namespace moc
