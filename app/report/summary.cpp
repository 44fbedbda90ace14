#include "app/report/summary.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <ostream>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "app/report/report.h"

namespace moc {
namespace {

using Metrics = std::vector<std::pair<std::string, double>>;
using Getter = std::function<std::optional<double>(const Metrics&)>;

std::optional<double> metric(const Metrics& m, std::string_view name) {
  for (const auto& [k, v] : m)
    if (k == name && std::isfinite(v)) return v;
  return std::nullopt;
}

Getter scaled(std::string name, double scale) {
  return [name = std::move(name), scale](const Metrics& m) -> std::optional<double> {
    if (auto v = metric(m, name)) return *v * scale;
    return std::nullopt;
  };
}

// The first of several metrics a point has (older or hand-made points may lack the mode's own name).
Getter first_of(std::vector<std::pair<std::string, double>> names) {
  return [names = std::move(names)](const Metrics& m) -> std::optional<double> {
    for (const auto& [name, scale] : names)
      if (auto v = metric(m, name)) return *v * scale;
    return std::nullopt;
  };
}

constexpr double kGiB = 1.0 / (1024.0 * 1024.0 * 1024.0);
constexpr double kMiB = 1.0 / (1024.0 * 1024.0);

struct ValueSpec {
  SummaryColumn column;
  Getter get;
};

// What each mode is for: its main timing first (lower is better; the speedup's basis: dense / this), then
// its noise, rates, floors and memory. A mode this list does not know gets the generic median.
struct ModeSpec {
  std::string title;
  std::vector<ValueSpec> values;
  std::string memory_metric;   // "peak vs dense" basis; empty: none
  std::string quality_metric;  // "perplexity vs dense" basis (this / dense, lower is better); empty: none
};

ValueSpec value(std::string key, std::string title, std::string unit, Getter get, int decimals = -1) {
  SummaryColumn c;
  c.key = std::move(key);
  c.title = std::move(title);
  c.unit = std::move(unit);
  c.decimals = decimals;
  return {std::move(c), std::move(get)};
}

SummaryColumn text_column(const std::string& key) {
  SummaryColumn c;
  c.key = c.title = key;
  c.text = true;
  return c;
}

ValueSpec noise() { return value("noise_pct", "± %", "%", scaled("noise", 100.0), 1); }

ModeSpec spec_of(const std::string& mode) {
  if (mode == "train")
    return {"training step",
            {value("step_ms", "step (ms)", "ms", first_of({{"step_ms", 1}, {"median_ms", 1}})), noise(),
             value("tokens_per_s", "tokens/s", "1/s", scaled("tokens_per_s", 1), 0),
             value("mfu_pct", "MFU (%)", "%", scaled("mfu_pct", 1), 1),
             value("peak_GiB", "peak (GiB)", "GiB", scaled("peak_bytes", kGiB), 2),
             value("activations_GiB", "activations (GiB)", "GiB", scaled("peak_activations_bytes", kGiB), 2),
             value("optimizer_GiB", "optimizer (GiB)", "GiB", scaled("peak_optimizer_state_bytes", kGiB), 2)},
            "peak_bytes", ""};
  if (mode == "decode")
    return {"end-to-end greedy decoding (one step = one token per row)",
            {value("ms_per_token", "ms/token", "ms", first_of({{"ms_per_token", 1}, {"median_ms", 1}})), noise(),
             value("tokens_per_s", "tokens/s", "1/s", scaled("tokens_per_s", 1), 0),
             value("prefill_ms", "prefill (ms)", "ms", scaled("prefill_ms", 1)),
             value("peak_GiB", "peak (GiB)", "GiB", scaled("peak_bytes", kGiB), 2)},
            "", ""};
  if (mode == "ffn-decode")
    return {"one FFN layer, one token per row (weight-bandwidth bound)",
            {value("latency_us", "latency (µs)", "us", first_of({{"latency_us", 1}, {"median_ms", 1e3}})), noise(),
             value("GBps", "GB/s", "GB/s", scaled("achieved_GBps", 1)),
             value("floor_us", "floor (µs)", "us", scaled("floor_us", 1)),
             value("pct_of_floor", "% of floor", "%", scaled("pct_of_floor", 1), 0),
             value("channels_read", "channels read", "", scaled("union_channels", 1), 0)},
            "", ""};
  if (mode == "ffn-train")
    return {"one FFN layer, forward + backward",
            {value("fwd_bwd_ms", "fwd+bwd (ms)", "ms", first_of({{"fwd_bwd_ms", 1}, {"median_ms", 1}})), noise(),
             value("forward_ms", "forward (ms)", "ms", scaled("forward_ms", 1)),
             value("backward_ms", "backward (ms)", "ms", scaled("backward_ms", 1)),
             value("activations_MiB", "stored activations (MiB)", "MiB", scaled("ffn_activation_bytes", kMiB), 1)},
            "ffn_activation_bytes", ""};
  if (mode == "eval")
    return {"next-token loss and perplexity on text",
            {value("eval_ms", "pass (ms)", "ms", first_of({{"eval_ms", 1}, {"median_ms", 1}})), noise(),
             value("tokens_per_s", "tokens/s", "1/s", scaled("tokens_per_s", 1), 0),
             value("eval_loss", "loss", "", scaled("eval_loss", 1), 4),
             value("eval_ppl", "perplexity", "", scaled("eval_ppl", 1), 2),
             value("eval_tokens", "tokens", "", scaled("eval_tokens", 1), 0)},
            "",
            "eval_ppl"};
  if (mode == "topk")
    return {"row top-K selection",
            {value("latency_us", "latency (µs)", "us", first_of({{"latency_us", 1}, {"median_ms", 1e3}})), noise(),
             value("Mrows_per_s", "rows/s (M)", "1/s", scaled("rows_per_s", 1e-6))},
            "", ""};
  return {mode, {value("median_ms", "median (ms)", "ms", scaled("median_ms", 1)), noise()}, "", ""};
}

// 3 significant digits without an exponent (1.72, 30.1, 581, 2175), or `decimals` digits.
std::string number(double v, int decimals) { return report::format_number(v, decimals); }

std::string axis_value(const db::PointRecord& p, const std::string& name) {
  for (const auto& [k, v] : p.axes)
    if (k == name) return v;
  return "";
}

// The key that pairs a point with its dense twin: every axis but the FFN's kind, K and the selection's
// ranking (a dense FFN selects nothing: one dense point serves every ranking).
std::string twin_key(const db::PointRecord& p) {
  std::string key;
  for (const auto& [k, v] : p.axes)
    if (k != "ffn" && k != "k" && k != "mode" && k != "topk_position" && k != "select") key += k + "=" + v + " ";
  return key;
}

std::string ratio_text(double r) { return number(r, 2) + "x"; }

SummaryTable table_of(const std::string& mode, const std::vector<const db::PointRecord*>& pts, bool gpu) {
  const ModeSpec spec = spec_of(mode);
  SummaryTable t;
  t.id = mode;
  t.title = mode + ": " + spec.title;
  // Axis columns: the axes whose value varies among this mode's points (the FFN's always, when swept).
  std::vector<std::string> axes;
  for (const auto* p : pts)
    for (const auto& [k, v] : p->axes)
      if (k != "mode" && std::find(axes.begin(), axes.end(), k) == axes.end()) axes.push_back(k);
  std::erase_if(axes, [&](const std::string& a) {
    if (a == "ffn") return false;
    std::set<std::string> seen;
    for (const auto* p : pts) seen.insert(axis_value(*p, a));
    return seen.size() < 2;
  });
  for (const auto& a : axes) t.columns.push_back(text_column(a));
  t.columns.push_back(text_column("status"));
  // Profiled points: kernels per step and the GPU's busy time per step (`mocbench stats` has the rest).
  std::vector<ValueSpec> values = spec.values;
  if (std::any_of(pts.begin(), pts.end(), [](const auto* p) { return metric(p->metrics, "profile_kernels").has_value(); })) {
    values.push_back(value("kernels_per_step", gpu ? "kernels/step" : "ops/step", "", scaled("profile_kernels", 1), 1));
    values.push_back(value("gpu_busy_ms", gpu ? "GPU busy (ms)" : "busy (ms)", "ms", scaled("profile_gpu_busy_ms", 1)));
  }
  // Training on real text ([data]): the validation loss and perplexity after the last step; MoC decode
  // points: the channels a step reads (the union over the batch).
  auto any_has = [&](const char* key) {
    return std::any_of(pts.begin(), pts.end(), [&](const auto* p) { return metric(p->metrics, key).has_value(); });
  };
  if (mode == "train" && any_has("val_ppl")) {
    values.push_back(value("val_loss", "val loss", "", scaled("val_loss", 1), 3));
    values.push_back(value("val_ppl", "val ppl", "", scaled("val_ppl", 1), 2));
  }
  // Data-parallel points: tokens/s above is the ranks' total; per GPU, against N x the same point on one
  // GPU, the communication's time per step and the part of it backward did not hide.
  if (mode == "train" && any_has("ranks")) {
    values.push_back(value("tokens_per_s_per_gpu", "tokens/s/GPU", "1/s", scaled("tokens_per_s_per_gpu", 1), 0));
    values.push_back(value("scaling_pct", "scaling (%)", "%", scaled("scaling_efficiency_pct", 1), 1));
    values.push_back(value("comm_ms", "comm (ms)", "ms", scaled("comm_ms", 1)));
    values.push_back(value("comm_exposed_ms", "exposed (ms)", "ms", scaled("comm_exposed_ms", 1)));
  }
  // A median that never met the noise target: the flag as a column too, for the CSV and JSON printers (the
  // table and Markdown also mark the noise with "!").
  if (std::any_of(pts.begin(), pts.end(), [](const auto* p) {
        const auto met = metric(p->metrics, "noise_met");
        return p->status == "ok" && met && *met == 0.0;
      }))
    values.push_back(value("noise_met", "noise met", "", scaled("noise_met", 1), 0));
  if (mode == "decode" && any_has("union_channels"))
    values.push_back(value("channels_read", "channels read", "", scaled("union_channels", 1), 0));
  for (const auto& v : values) t.columns.push_back(v.column);
  const bool has_ffn = std::find(axes.begin(), axes.end(), "ffn") != axes.end();
  std::map<std::string, const db::PointRecord*> dense;
  if (has_ffn)
    for (const auto* p : pts)
      if (axis_value(*p, "ffn") == "dense" && p->status == "ok") dense.emplace(twin_key(*p), p);
  const bool speedups = !dense.empty() && std::any_of(pts.begin(), pts.end(), [](const auto* p) {
    return axis_value(*p, "ffn") != "dense";
  });
  if (speedups) {
    t.columns.push_back(value("speedup_vs_dense", "vs dense (speed)", "x", {}, 2).column);
    if (!spec.memory_metric.empty())
      t.columns.push_back(value("memory_vs_dense", "vs dense (memory)", "x", {}, 2).column);
    if (!spec.quality_metric.empty())
      t.columns.push_back(value("ppl_vs_dense", "vs dense (perplexity)", "x", {}, 3).column);
  }
  // Per FFN variant: speedups and the points they were seen at, for the headline.
  std::map<std::string, std::vector<std::pair<double, std::string>>> by_ffn;
  int noisy = 0;  // points whose repetitions hit a bound before the noise met the scenario's target
  for (const auto* p : pts) {
    std::vector<SummaryCell> row;
    for (const auto& a : axes) row.emplace_back(axis_value(*p, a));
    row.emplace_back(p->status);
    const bool ok = p->status == "ok";
    const auto met = metric(p->metrics, "noise_met");  // absent in runs stored before it was recorded
    const bool not_final = ok && met && *met == 0.0;
    noisy += not_final ? 1 : 0;
    for (const auto& v : values) {
      const auto x = ok ? v.get(p->metrics) : std::nullopt;
      std::string text = x ? number(*x, v.column.decimals) : "-";
      if (not_final && v.column.key == "noise_pct") text += "!";
      row.emplace_back(x, std::move(text));
    }
    if (speedups) {
      std::optional<double> s, mem, ppl;
      const auto it = dense.find(twin_key(*p));
      // this / dense of a metric both points have (dense's above 0).
      auto against_dense = [&](const std::string& name) -> std::optional<double> {
        const auto a = metric(it->second->metrics, name), b = metric(p->metrics, name);
        if (a && b && *a > 0) return *b / *a;
        return std::nullopt;
      };
      if (ok && it != dense.end()) {
        const auto a = spec.values[0].get(it->second->metrics), b = spec.values[0].get(p->metrics);
        if (a && b && *b > 0) s = *a / *b;
        if (!spec.memory_metric.empty()) mem = against_dense(spec.memory_metric);
        if (!spec.quality_metric.empty()) ppl = against_dense(spec.quality_metric);
      }
      row.emplace_back(s, s ? ratio_text(*s) : "-");
      if (!spec.memory_metric.empty()) row.emplace_back(mem, mem ? ratio_text(*mem) : "-");
      if (!spec.quality_metric.empty()) row.emplace_back(ppl, ppl ? report::format_number(*ppl, 3) + "x" : "-");
      const std::string ffn = axis_value(*p, "ffn");
      if (s && ffn != "dense") {
        std::string where;  // the point's other shown axes
        for (const auto& a : axes)
          if (a != "ffn") where += (where.empty() ? "" : " ") + a + "=" + axis_value(*p, a);
        by_ffn[ffn].push_back({*s, where});
      }
    }
    t.rows.push_back(std::move(row));
  }
  if (noisy > 0)
    t.notes.push_back("! " + std::to_string(noisy) + (noisy == 1 ? " point" : " points") +
                          " stopped at the repetition or time bound with the noise above the scenario's "
                          "target_noise: those medians are not final (a quieter machine, or more max_reps / "
                          "time_bound_s)");
  for (auto& [ffn, v] : by_ffn) {
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    auto at = [](const std::pair<double, std::string>& e) {
      return ratio_text(e.first) + (e.second.empty() ? "" : " (" + e.second + ")");
    };
    t.notes.push_back(ffn + " vs dense: " + (v.size() > 1 ? "best " + at(*hi) + ", worst " + at(*lo) : at(*hi)) +
                          " (speed; > 1 is faster)");
  }
  return t;
}

const char* colour_of(const SummaryColumn& c, const SummaryCell& cell) {
  if (c.key == "status") return cell.text == "ok" ? nullptr : "\033[33m";
  if (c.key == "noise_pct" && !cell.text.empty() && cell.text.back() == '!') return "\033[33m";
  if (c.key == "speedup_vs_dense" && cell.value) return *cell.value >= 1.0 ? "\033[32m" : "\033[31m";
  if (c.key == "memory_vs_dense" && cell.value) return *cell.value <= 1.0 ? "\033[32m" : "\033[31m";
  if (c.key == "ppl_vs_dense" && cell.value) return *cell.value <= 1.0 ? "\033[32m" : "\033[31m";
  return nullptr;
}

std::string environment_line(const RunSummary& s) {
  std::string line;
  for (const auto& e : s.environment) line += (line.empty() ? "" : " ") + e;
  return line;
}

// The shared printers (db/table.h), framed with the run's heading, environment and error.
void print_text(const RunSummary& s, std::ostream& out, bool colour) {
  out << s.heading << "\n";
  if (!s.environment.empty()) out << "  environment: " << environment_line(s) << "\n";
  if (!s.error.empty()) out << (colour ? "\033[33m" : "") << "  " << s.error << (colour ? "\033[0m" : "") << "\n";
  report::TextStyle style;
  if (colour) style.colour = colour_of;
  for (const auto& t : s.tables) {
    out << "\n" << (colour ? "\033[1m" : "") << t.title << (colour ? "\033[0m" : "") << "\n";
    report::print_grid(t, out, style);
    for (const auto& h : t.notes) out << "  " << h << "\n";
  }
}

void print_markdown(const RunSummary& s, std::ostream& out) {
  out << "**" << s.heading << "**\n";
  if (!s.environment.empty()) out << "\nenvironment: `" << environment_line(s) << "`\n";
  if (!s.error.empty()) out << "\n" << s.error << "\n";
  for (const auto& t : s.tables) report::print_markdown(t, out);
}

// One CSV for every mode: run, mode, then the union of the tables' columns (by key, in first-seen order);
// headers carry the unit ("latency_us", "peak_GiB"); values exact.
void print_csv(const RunSummary& s, std::ostream& out) {
  std::vector<const SummaryTable*> tables;
  std::vector<std::vector<std::string>> prefix;
  for (const auto& t : s.tables) {
    tables.push_back(&t);
    prefix.push_back({std::to_string(s.run_id), t.id});
  }
  report::print_csv(tables, out, {"run", "mode"}, prefix);
}

// Through nlohmann-json: a cell that is not a finite number (NaN, +-Inf, or no value) is null. Each table is
// report::to_json's object ("id" is the mode, "notes" the headlines).
void print_json(const RunSummary& s, std::ostream& out) {
  using J = report::Json;
  J doc;
  doc["run"] = s.run_id;
  doc["heading"] = s.heading;
  doc["error"] = s.error;
  doc["environment"] = s.environment;
  J tables = J::array();
  for (const auto& t : s.tables) tables.push_back(report::to_json(t));
  doc["tables"] = tables;
  out << doc.dump(-1, ' ', false, J::error_handler_t::replace) << "\n";
}

// A CPU run's GEMM library as its machine description recorded it (runs since 2026-11-28): " (OpenBLAS 0.3.21,
// OpenMP, 2 threads)" -- CPU timings depend on it (its pthread build ran the decode step 2x slower, bench/RESULTS.md
// part 23). Empty for GPU runs and for runs without it.
std::string cpu_blas_note(const db::RunRecord& run) {
  if (run.device_kind != "cpu") return "";
  const auto m = nlohmann::json::parse(run.machine_json, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object() || !m.contains("blas") || !m["blas"].is_object()) return "";
  const auto& b = m["blas"];
  std::string name = b.contains("config") && b["config"].is_string() ? b["config"].get<std::string>() : "BLAS";
  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the library and its version
  const auto first = name.find(' ');
  const auto second = first == std::string::npos ? first : name.find(' ', first + 1);
  if (second != std::string::npos) name.resize(second);
  std::string note = " (" + name;
  if (b.contains("threading") && b["threading"].is_string()) note += ", " + b["threading"].get<std::string>();
  if (b.contains("threads") && b["threads"].is_number_integer())
    note += ", " + std::to_string(b["threads"].get<int>()) + " thread" + (b["threads"].get<int>() == 1 ? "" : "s");
  return note + ")";
}

}  // namespace

RunSummary summarize_run(const db::ResultsDb& store, std::int64_t run_id) {
  const auto run = store.run(run_id);
  if (!run) throw std::invalid_argument("no run " + std::to_string(run_id) + " in " + store.path());
  const auto points = store.points(run_id);
  RunSummary s;
  s.run_id = run_id;
  s.heading = "run " + std::to_string(run_id) + ": " + run->scenario_name + " on " + run->device_kind +
              (run->device_name.empty() ? "" : " " + run->device_name) + cpu_blas_note(*run) + ", " + run->status +
              ", " + std::to_string(points.size()) + " point" + (points.size() == 1 ? "" : "s");
  s.error = run->error;
  s.environment = db::run_environment(*run);  // none for runs recorded before the environment was stored
  std::vector<std::string> modes;
  std::map<std::string, std::vector<const db::PointRecord*>> by_mode;
  for (const auto& p : points) {
    const std::string m = point_mode(*run, p);
    if (!by_mode.contains(m)) modes.push_back(m);
    by_mode[m].push_back(&p);
  }
  for (const auto& m : modes) s.tables.push_back(table_of(m, by_mode[m], run->device_kind != "cpu"));
  return s;
}

SummaryFormat parse_summary_format(const std::string& text) {
  if (text == "table") return SummaryFormat::table;
  if (text == "csv") return SummaryFormat::csv;
  if (text == "json") return SummaryFormat::json;
  if (text == "markdown" || text == "md") return SummaryFormat::markdown;
  throw std::invalid_argument("unknown format '" + text + "'; use table, csv, json or markdown");
}

bool colour_terminal(std::FILE* f) {
  if (!isatty(fileno(f)) || std::getenv("NO_COLOR")) return false;
  const char* term = std::getenv("TERM");
  return !term || std::string_view(term) != "dumb";
}

void print_summary(const RunSummary& s, SummaryFormat format, std::ostream& out, bool colour) {
  switch (format) {
    case SummaryFormat::table: print_text(s, out, colour); break;
    case SummaryFormat::markdown: print_markdown(s, out); break;
    case SummaryFormat::csv: print_csv(s, out); break;
    case SummaryFormat::json: print_json(s, out); break;
  }
}

std::vector<std::pair<std::string, std::string>> run_environment_now() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* k : {"MOCBENCH_ATTN", "MOCBENCH_SKINNY", "MOCBENCH_SKINNY_BIG", "MOCBENCH_CUPTI_KINDS",
                        "MOCBENCH_HOST_MEMORY_MIB"})
    if (const char* v = std::getenv(k); v != nullptr && *v != '\0') out.emplace_back(k, v);
  return out;
}

std::string run_config_json(const std::string& backend, std::size_t points) {
  nlohmann::ordered_json o;
  o["backend"] = backend;
  o["points"] = points;
  nlohmann::ordered_json env = nlohmann::ordered_json::object();
  for (const auto& [k, v] : run_environment_now()) env[k] = v;
  o["env"] = env;
  return o.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string run_json_line(std::size_t index, const std::string& mode, const std::string& status,
                          const std::vector<std::pair<std::string, std::string>>& axes,
                          const std::vector<std::pair<std::string, double>>& metrics, const std::string& error) {
  nlohmann::ordered_json o;
  o["index"] = index;
  o["mode"] = mode;
  o["status"] = status;
  for (const auto& [k, v] : axes) o[k] = v;
  for (const auto& [k, v] : metrics) o[k] = std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json();
  if (!error.empty()) o["error"] = error;
  return o.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace moc
