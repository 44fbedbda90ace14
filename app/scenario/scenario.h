// Scenario files: a TOML description of a benchmark study (mode, model, measurement settings and sweep
// axes, nvbench-like: axes x measurement), validated before any work and expanded into sweep points.
// The format is documented in scenarios/README.md.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "app/modes/text_train.h"
#include "model/config.h"

namespace moc {

// A problem in a scenario file. what() is "file:line:col: message\n  hint: ..." so that editors and
// terminals can jump to the offending key or value.
struct ScenarioError : std::runtime_error {
  ScenarioError(std::string file_, int line_, int col_, std::string message_, std::string hint_);
  std::string file;
  int line = 0, col = 0;  // 1-based; 0 when the problem has no position (e.g. an unreadable file)
  std::string message, hint;
};

// How each point is timed. Defaults apply where [measure] says nothing.
struct Measurement {
  int warmup = 3;              // untimed repetitions before timing
  int min_reps = 5;            // timed repetitions, at least...
  int max_reps = 100;          // ...and at most
  double time_bound_s = 10;    // stop after this much timed work once min_reps are done
  double target_noise = 0.02;  // stop once the relative noise of the median falls below this
  bool cold = true;            // cold timing: ffn-decode rotates weight copies, other modes flush the cache
  int prompt = 128;            // decode mode: prompt tokens per sequence
  int generate = 128;          // decode mode: generated tokens per sequence
  bool operator==(const Measurement&) const = default;
};

struct SourcePos {
  int line = 0, col = 0;
};

// A typed scalar from the file (axis value, [model]/[measure] setting, exclude/include entry).
struct ScenarioValue {
  enum class Type : std::uint8_t { integer, floating, boolean, string };
  Type type = Type::string;
  std::int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  std::string text;  // canonical text: 1024, 0.2, true, moc_2:8 (what apply_override and the store see)
  SourcePos pos;
};

struct ScenarioSetting {  // key = value
  std::string key;
  ScenarioValue value;
  SourcePos key_pos;
};

struct ScenarioAxis {  // name = [values...]; an exclude entry uses the same shape (value or list of values)
  std::string name;
  std::vector<ScenarioValue> values;
  SourcePos pos;
};

struct ScenarioOverride {  // [overrides.<backend>]
  std::string backend;
  SourcePos pos;
  std::vector<ScenarioSetting> model, measure, data;
  std::vector<ScenarioAxis> axes;  // replace the values of axes declared in [axes]
};

// The most points one sweep may expand to (per backend, counted as the product of the axes' lengths before
// [[exclude]]); a larger sweep is refused at its longest axis.
inline constexpr std::size_t kMaxSweepPoints = 10000;

// One point of a sweep, fully resolved for one backend.
// The decode implementation a point runs when the scenario does not say (bench/RESULTS.md: the faster one).
inline constexpr const char* kDefaultDecodeImpl = "kernels";

struct ScenarioPoint {
  int index = 0;
  std::string mode;                                       // train | decode | ffn-train | ffn-decode | topk
  std::vector<std::pair<std::string, std::string>> axes;  // the point's axis values (name, text), file order
  ModelConfig model;  // preset, [model] keys, then the point's model axes (ffn, k, gcp, topk_position, ...);
                      // seq_len raised to cover the point (seq, or prompt + generate for decode); validated
  int batch = 1;  // per GPU when gpus > 1
  int gpus = 1;   // data-parallel ranks (issue 15): one process per GPU
  bool zero1 = false;        // gpus > 1: optimizer state sharded over the ranks (ZeRO-1)
  bool comm_overlap = true;  // gpus > 1: gradient buckets overlap backward (false: all after backward)
  int seq = 0;  // defaults to the model's seq_len (before it is raised) when not an axis
  Measurement measure;
  std::string topk_backend = "own";  // own | raft
  // decode and ffn-decode: the step as one kernel (or a few) per op, replayed as a CUDA graph ("kernels", the
  // only value left: "persistent" was retired and is refused when a scenario is read).
  std::string decode_impl = kDefaultDecodeImpl;
  std::string precision;             // bf16 | bf16-fp32master | fp32 (default: fp32 on cpu, bf16 on cuda)
  std::string weights;               // [model] weights: a safetensors checkpoint loaded into the model ("": random),
                                     // {axis} placeholders replaced by the point's values
  bool weights_deferred = false;     // weights had placeholders: its existence is checked when the run starts
  TextData data;                     // [data]: train on real text / decode real prompts (data.corpus "": none)
  // [profile]: trace every kernel (CPU ops on the CPU backend) of profile_steps extra repetitions.
  bool profile_kernels = true;
  int profile_steps = 1;

  // Value text of an axis of this point, or nullptr when the point does not sweep it.
  const std::string* axis(std::string_view name) const;
  // One line for --dry-run: index, mode, axis values, resolved model and sizes.
  std::string describe() const;
};

// An override from [overrides.<backend>] that expand() applied, e.g. {"model", "preset", "tiny"}.
struct AppliedOverride {
  std::string section, key, value;
};

struct Scenario {
  std::string name, description;
  std::string path;             // as given to load_scenario/parse_scenario; used in every error message
  std::string text;             // the file's bytes (stored with each run for reproducibility)
  std::string hash;             // 16 hex digits of FNV-1a 64 over text
  std::string device = "auto";  // auto | cpu | cuda

  // Parsed tables, in file order (toml++ tables are sorted by key, so order comes from source positions).
  std::optional<ScenarioValue> mode;                  // top-level mode: the default when mode is not an axis
  std::vector<ScenarioSetting> model;                 // [model]: preset and moc::override_keys()
  std::vector<ScenarioSetting> measure;               // [measure]
  std::vector<ScenarioSetting> profile;               // [profile]: kernels, steps
  std::vector<ScenarioSetting> data;                  // [data]: corpus, steps, ... (app/modes/text_train.h)
  SourcePos data_pos;                                 // where [data] is (for messages)
  std::vector<ScenarioAxis> axes;                     // [axes]
  std::vector<std::vector<ScenarioAxis>> exclude;     // [[exclude]]: a point goes when it matches every key
  std::vector<std::vector<ScenarioSetting>> include;  // [[include]]: extra points
  std::vector<ScenarioOverride> overrides;            // [overrides.cpu], [overrides.cuda]

  // The points for a backend ("cpu" | "cuda") with that backend's overrides applied, each reported in
  // `applied`: the cartesian product of the axes in file order (the first axis varies slowest), minus the
  // excludes, plus the includes (duplicates dropped), indexed 0..n-1. Throws ScenarioError.
  std::vector<ScenarioPoint> expand(const std::string& backend, std::vector<AppliedOverride>* applied = nullptr) const;
  std::vector<std::string> axis_names() const;
};

// Reads and validates a scenario file: syntax, keys, types, values, and every point of both the cpu and
// the cuda expansion resolved to a valid ModelConfig. Throws ScenarioError naming the first problem.
Scenario load_scenario(const std::string& path);
Scenario parse_scenario(std::string_view text, const std::string& path);

// Valid values, for messages and --help.
std::vector<std::string> scenario_modes();     // train, decode, ffn-train, ffn-decode, topk
std::vector<std::string> scenario_backends();  // cpu, cuda

}  // namespace moc
