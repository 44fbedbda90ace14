// mocbench command line. Exit codes: 0 success, 1 runtime failure, 2 bad input (config/arguments).
#include <CLI/CLI.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "app/ceilings.h"
#include "app/paper_report.h"
#include "app/json_text.h"
#include "app/perfetto_export.h"
#include "app/profile_stats.h"
#include "app/report.h"
#include "app/runner.h"
#include "app/scenario_keys.h"
#include "model/data/token_data.h"
#include "model/data/tokenizer.h"
#include "app/summary.h"
#include "db/results_db.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/decoder.h"
#include "model/memory_model.h"
#include "model/trainer.h"
#include "model/transformer.h"
#include "profiling/ranges.h"
#ifdef MOCBENCH_HAVE_CUDA
#include "kernels/cuda/cuda_info.h"
#include "kernels/cuda/cuda_ops.h"
#endif

#ifndef MOCBENCH_VERSION
#define MOCBENCH_VERSION "unknown"
#endif

namespace {
using namespace moc;

constexpr int kExitRuntime = 1;
constexpr int kExitBadInput = 2;

void apply_overrides(ModelConfig& cfg, const std::vector<std::string>& sets) {
  for (const auto& kv : sets) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) throw ConfigError("--set expects key=value, got '" + kv + "'");
    apply_override(cfg, kv.substr(0, eq), kv.substr(eq + 1));
  }
}

std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f GB", bytes / 1e9);
  return buf;
}

int cmd_memory_model(const std::string& preset_name, long batch, long seq, const std::string& ffn, const std::string& k,
                     bool gcp, const std::vector<std::string>& sets) {
  ModelConfig cfg = preset(preset_name);
  apply_override(cfg, "ffn", ffn);
  if (!k.empty()) apply_override(cfg, "k", k);
  cfg.ffn.gcp = gcp;
  apply_overrides(cfg, sets);
  if (batch <= 0 || seq <= 0) throw ConfigError("batch and seq must be positive");
  cfg.validate();
  const auto paper = paper_activation_model(cfg, batch, seq, 2.0);
  ModelConfig bf = cfg;
  bf.act_dtype = DType::bf16;
  const auto engine = engine_activation_model(bf, batch, seq);
  std::printf("%s\nbatch %ld, seq %ld; bf16 activations (paper: 2 bytes per element)\n", cfg.describe().c_str(), batch,
              seq);
  if (cfg.moe())
    std::printf("FFN activation (paper Table 2): %.2f bsd per expert, x %d experts per token\n\n", paper_ffn_bsd(cfg),
                cfg.experts_per_token);
  else
    std::printf("FFN activation (paper Table 2): %.2f bsd\n\n", paper_ffn_bsd(cfg));
  // The paper's profiled table (§2: batch 64, seq 256, dense, bf16) where it applies.
  struct Measured {
    double attention, ffn, others, head, total;
  };
  const Measured* measured = nullptr;
  static constexpr Measured k350m{177e6, 400e6, 68e6, 2.16e9, 17.64e9}, k1b{336e6, 791e6, 134e6, 2.16e9, 32.4e9};
  if (batch == 64 && seq == 256 && cfg.ffn.kind == FfnKind::dense && !cfg.ffn.gcp) {
    if (cfg.preset == "350m" && cfg.layers == 24) measured = &k350m;
    if (cfg.preset == "1b" && cfg.layers == 24) measured = &k1b;
  }
  std::printf("%-22s %14s %14s %14s\n", "", "paper model", "mocbench keeps", measured ? "paper measured" : "");
  auto row = [&](const char* name, double a, double b, double m) {
    std::printf("%-22s %14s %14s %14s\n", name, gb(a).c_str(), gb(b).c_str(), measured && m > 0 ? gb(m).c_str() : "");
  };
  row("attention / layer", paper.attention, engine.attention, measured ? measured->attention : 0);
  row("ffn / layer", paper.ffn, engine.ffn, measured ? measured->ffn : 0);
  row("others / layer", paper.others_per_layer(), engine.others_per_layer(), measured ? measured->others : 0);
  row("  norm", paper.norm, engine.norm, 0);
  row("  residual", paper.residual, engine.residual, 0);
  row("LM head", paper.head, engine.head, measured ? measured->head : 0);
  row("total", paper.total(), engine.total(), measured ? measured->total : 0);
  std::printf("\nffn / attention = %.2f (paper model), %.2f (mocbench)%s\n", paper.ffn / paper.attention,
              engine.ffn / engine.attention, measured ? ", 2.3 (paper measured)" : "");
  std::printf("mocbench keeps neither the attention output projection O nor the FFN output D (no backward reads\n"
              "them; the residual stream after each add is kept instead), hence 4 bsd + log-sum-exp for attention,\n"
              "nor the RMSNorm outputs (recomputed in backward from the residual and 1/rms: only 1/rms is kept).\n");
  return 0;
}

int cmd_smoke(const std::string& preset_name, int batch, int seq, int steps, int gen, const std::vector<std::string>& sets) {
  ModelConfig cfg = preset(preset_name);
  if (cfg.ffn.kind == FfnKind::dense && preset_name.starts_with("tiny")) apply_override(cfg, "ffn", "moc");
  apply_overrides(cfg, sets);
  if (batch <= 0 || seq <= 0 || steps < 0 || gen < 0) throw ConfigError("batch, seq must be positive; steps, gen >= 0");
  cfg.seq_len = std::max(cfg.seq_len, seq);
  cfg.validate();
  auto ops = make_cpu_ops();
  HostRangeTimer timer;
  Transformer model(*ops, cfg);
  model.set_ranges(&timer);
  std::printf("mocbench %s smoke on %s: %s, %.2fM parameters\n", MOCBENCH_VERSION, ops->name().c_str(),
              cfg.describe().c_str(), static_cast<double>(model.parameter_count()) / 1e6);

  // A fixed batch of a repeating pattern: the loss must fall as the model memorizes it.
  const std::int64_t n = static_cast<std::int64_t>(batch) * seq;
  std::vector<std::int32_t> tok(static_cast<std::size_t>(n)), tgt(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    tok[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 7 + i / seq) % cfg.vocab);
    tgt[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(((i + 1) * 7 + i / seq) % cfg.vocab);
  }
  Tensor tokens = ops->empty({n}, DType::i32, workspace_tag());
  Tensor targets = ops->empty({n}, DType::i32, workspace_tag());
  ops->upload_i32(tokens, tok);
  ops->upload_i32(targets, tgt);

  TrainConfig tc;
  tc.lr = 3e-3f;
  tc.warmup_steps = std::max(1, steps / 10);
  tc.total_steps = std::max(1, steps);
  Trainer trainer(model, tc);
  double first = 0, last = 0, total_ms = 0;
  for (int s = 0; s < steps; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = trainer.step(tokens, targets, batch, seq);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    total_ms += ms;
    if (s == 0) first = r.loss;
    last = r.loss;
    if (s == 0 || (s + 1) % std::max(1, steps / 5) == 0)
      std::printf("  step %4d  loss %.4f  grad-norm %.3f  lr %.2e  %.1f ms\n", s + 1, r.loss, r.grad_norm, r.lr, ms);
  }
  if (steps) {
    std::printf("train: loss %.4f -> %.4f, %.2f ms/step (mean of %d, batch %d x seq %d)\n", first, last,
                total_ms / steps, steps, batch, seq);
    auto peak = ops->memory().at_peak();
    std::printf("peak memory %s:", format_bytes(ops->memory().peak_total()).c_str());
    for (std::size_t c = 0; c < kMemCategories; ++c)
      if (peak.by_category[c])
        std::printf(" %s %s", std::string(category_name(static_cast<MemCategory>(c))).c_str(),
                    format_bytes(peak.by_category[c]).c_str());
    std::printf("\n");
    const auto engine = engine_activation_model(cfg, batch, seq);
    std::printf("activations at peak: measured %s, engine model %s\n",
                format_bytes(peak.category(MemCategory::activations)).c_str(),
                format_bytes(static_cast<std::int64_t>(engine.total())).c_str());
    std::printf("host time per range (all steps):\n");
    for (const auto& [name, st] : timer.stats())
      if (!name.starts_with("layer."))
        std::printf("  %-14s %9.2f ms  (%lld calls)\n", name.c_str(), static_cast<double>(st.total_ns) / 1e6,
                    static_cast<long long>(st.calls));
  }
  if (gen > 0) {
    const int prompt_len = std::min(seq, 8);
    std::vector<std::int32_t> prompt(tok.begin(), tok.begin() + prompt_len);
    Decoder dec(model, 1, prompt_len + gen, {});
    auto t0 = std::chrono::steady_clock::now();
    auto outs = dec.generate(prompt, prompt_len, gen, true);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("decode: prompt %d, %d new tokens greedy in %.2f ms:", prompt_len, gen, ms);
    for (auto t : outs[0]) std::printf(" %d", t);
    std::printf("\n");
  }
  return 0;
}

int cmd_list(const std::string& db_path) {
  auto store = db::ResultsDb::open(db_path, db::OpenMode::read_only);
  std::printf("%-5s %-12s %-24s %-6s %-28s %s\n", "run", "status", "scenario", "device", "device name", "started");
  for (const auto& r : store.runs()) {
    std::time_t t = static_cast<std::time_t>(r.started_unix_ms / 1000);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
    std::printf("%-5lld %-12s %-24s %-6s %-28s %s\n", static_cast<long long>(r.id), r.status.c_str(),
                r.scenario_name.c_str(), r.device_kind.c_str(), r.device_name.substr(0, 28).c_str(), when);
  }
  return 0;
}

int cmd_show(const std::string& db_path, long long run_id, const std::string& format) {
  auto store = db::ResultsDb::open(db_path, db::OpenMode::read_only);
  if (!store.run(run_id)) throw ConfigError("no run " + std::to_string(run_id) + " in " + db_path + " (see `mocbench list`)");
  SummaryFormat fmt;
  try {
    fmt = parse_summary_format(format);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
  std::ostringstream o;
  print_summary(summarize_run(store, run_id), fmt, o, fmt == SummaryFormat::table && colour_terminal(stdout));
  std::fwrite(o.str().data(), 1, o.str().size(), stdout);
  return 0;
}

ExportFormat parse_format(const std::string& f) {
  if (f == "csv") return ExportFormat::csv;
  if (f == "json") return ExportFormat::json;
  throw ConfigError("unknown format '" + f + "'; use csv or json");
}

// An SQLite database (a results file, or any other application's) begins with this 16-byte header.
bool is_sqlite_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char head[16] = {};
  return f.read(head, sizeof head) && std::memcmp(head, "SQLite format 3", 16) == 0;
}

// Writes text to path (or stdout for "-" / empty; a device or pipe directly) through a temporary file made in
// the target's folder
// (mkstemp: never another file's name), renamed over the target once complete; on every failure the
// temporary file is removed, so a failed export leaves nothing behind and the target as it was. Refuses
// (exit 2, nothing written) a target that is an SQLite database -- the results file being exported, or any
// other: an export never writes over a database.
void write_output(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    // A device or a pipe (-o /dev/stdout, a FIFO): written as it is; there is nothing to replace.
    std::ofstream f(path, std::ios::binary);
    if (!(f << text) || !f.flush()) throw std::runtime_error("writing " + path + " failed");
    return;
  }
  if (is_sqlite_file(path))
    throw ConfigError("refusing to write the export over '" + path + "': it is an SQLite database (a results "
                      "file?), which an export never replaces; choose another -o");
  std::string tmp = path + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) throw std::runtime_error("cannot create a temporary file beside " + path + ": " + std::strerror(errno));
  auto fail = [&](const std::string& what) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    throw std::runtime_error(what + ": " + why + " (nothing was written to " + path + ")");
  };
  for (std::size_t off = 0; off < text.size();) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("writing " + tmp + " failed");
    off += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) fail("writing " + tmp + " failed");
  // mkstemp makes the file 0600; an export is as readable as a file the user would write.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(fd, 0666 & ~mask) != 0) fail("cannot set the permissions of " + tmp);
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("writing " + tmp + " failed: " + std::strerror(errno) + " (nothing was written to " + path + ")");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot move " + tmp + " to " + path + ": " + why);
  }
}

std::string axes_text(const db::PointRecord& p) {
  std::string axes;
  for (const auto& [k, v] : p.axes) axes += (axes.empty() ? "" : " ") + k + "=" + v;
  return axes.empty() ? "(single point)" : axes;
}

std::string join_indices(const std::vector<int>& v) {
  std::string s;
  for (int i : v) s += (s.empty() ? "" : ", ") + std::to_string(i);
  return s;
}

// Visits the profiled points of a run (only `point` when given), loading one profile at a time (a GPU
// point's profile may hold a million kernels). Throws ConfigError (exit 2) for an unknown run or point and
// for a run or point without a profile; nothing is visited then.
void for_each_profile(const db::ResultsDb& store, const std::string& db_path, long long run_id,
                      std::optional<int> point,
                      const std::function<void(const db::PointRecord&, const prof::ProfileTrace&)>& visit) {
  if (!store.run(run_id))
    throw ConfigError("no run " + std::to_string(run_id) + " in " + db_path + " (see `mocbench list`)");
  const auto points = store.points(run_id);
  auto profiled_indices = [&] {
    std::vector<int> v;
    for (const auto& p : points)
      if (store.profile(p.id)) v.push_back(p.index);
    return v;
  };
  const std::string hint = "run the scenario with profiling on ([profile] kernels = true, the default, and no "
                           "--no-profile)";
  if (point) {
    auto it = std::find_if(points.begin(), points.end(), [&](const auto& p) { return p.index == *point; });
    if (it == points.end()) {
      std::vector<int> all;
      for (const auto& p : points) all.push_back(p.index);
      throw ConfigError("run " + std::to_string(run_id) + " has no point " + std::to_string(*point) +
                        (all.empty() ? std::string("; it has no points") : "; its points: " + join_indices(all)));
    }
    auto t = store.profile(it->id);
    if (!t) {
      const auto profiled = profiled_indices();
      if (profiled.empty()) throw ConfigError("run " + std::to_string(run_id) + " has no profiled points: " + hint);
      throw ConfigError("point " + std::to_string(*point) + " of run " + std::to_string(run_id) +
                        " was not profiled; profiled points: " + join_indices(profiled));
    }
    visit(*it, *t);
    return;
  }
  int visited = 0;
  for (const auto& p : points)
    if (auto t = store.profile(p.id)) {
      visit(p, *t);
      ++visited;
    }
  if (!visited) throw ConfigError("run " + std::to_string(run_id) + " has no profiled points: " + hint);
}

// The ceilings of the device a profile ran on (unknown when the run recorded none).
prof::Ceilings trace_ceilings(const std::vector<db::CeilingsRecord>& all, const prof::ProfileTrace& t) {
  const auto c = db::ceilings_for_profile(all, t);
  return c ? prof::Ceilings{c->copy_GBps, c->gemm_tflops} : prof::Ceilings{};
}

int cmd_stats(const std::string& db_path, long long run_id, std::optional<int> point, std::vector<std::string> reports,
              const std::string& format, prof::TimeMode time) {
  const auto& known = stats::report_names();
  // The defaults, and stage_sum for a point whose profile has device-side stage stamps (the decode FFN kernels).
  const bool defaults = reports.empty();
  if (defaults) reports = stats::default_reports();
  for (const auto& r : reports)
    if (std::find(known.begin(), known.end(), r) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw ConfigError("unknown report '" + r + "'; reports: " + list);
    }
  auto store = db::ResultsDb::open(db_path, db::OpenMode::read_only);
  const auto run = store.run(run_id);
  std::ostringstream o;
  if (format == "json") o << "{\"run\": " << run_id << ", \"points\": [";
  bool first_block = true;
  std::size_t i = 0;
  const auto ceilings = store.ceilings(run_id);
  for_each_profile(store, db_path, run_id, point, [&](const db::PointRecord& p, const prof::ProfileTrace& trace) {
    const std::string mode = point_mode(*run, p);
    std::vector<stats::Table> tables;
    const prof::Ceilings c = trace_ceilings(ceilings, trace);
    for (const auto& r : reports)
      for (auto& t : stats::run_report(r, trace, p.metrics, mode, time, c)) tables.push_back(std::move(t));
    if (defaults && !trace.stages.empty()) tables.push_back(stats::stage_sum(trace));
    if (format == "table") {
      char info[256];
      std::snprintf(info, sizeof info, "%s profile, %d step(s), %.1f kernels per step", trace.source.c_str(),
                    trace.steps, static_cast<double>(trace.kernels.size()) / std::max(1, trace.steps));
      o << "point " << p.index << ": " << axes_text(p) << " (mode " << (mode.empty() ? "?" : mode) << "; " << info
        << "; " << prof::time_mode_name(time) << " device time";
      if (trace.dropped_records) o << "; " << trace.dropped_records << " records dropped";
      o << ")\n\n";
      for (const auto& t : tables) stats::print_text(t, o);
    } else if (format == "csv") {
      for (const auto& t : tables) {
        if (!first_block) o << "\n";
        first_block = false;
        stats::print_csv(t, o, {{"point", std::to_string(p.index)}, {"report", t.id}});
      }
    } else {
      o << (i ? ",\n " : "\n ") << "{\"point\": " << p.index << ", \"mode\": " << json_quote(mode) << ", \"axes\": {";
      for (std::size_t a = 0; a < p.axes.size(); ++a)
        o << (a ? ", " : "") << json_quote(p.axes[a].first) << ": " << json_quote(p.axes[a].second);
      o << "}, \"source\": " << json_quote(trace.source) << ", \"time\": " << json_quote(prof::time_mode_name(time))
        << ", \"steps\": " << trace.steps
        << ", \"dropped_records\": " << trace.dropped_records << ", \"reports\": [";
      for (std::size_t t = 0; t < tables.size(); ++t) {
        o << (t ? ",\n  " : "\n  ");
        stats::print_json(tables[t], o);
      }
      o << "]}";
    }
    ++i;
  });
  if (format == "json") o << "\n]}\n";
  std::fwrite(o.str().data(), 1, o.str().size(), stdout);
  return 0;
}

int cmd_export_perfetto(const std::string& db_path, const std::vector<long long>& ids, bool all,
                        std::optional<int> point, const std::string& output, prof::TimeMode time) {
  if (all || ids.size() != 1)
    throw ConfigError("--format perfetto exports exactly one run: name it (see `mocbench list`)");
  auto store = db::ResultsDb::open(db_path, db::OpenMode::read_only);
  std::vector<prof::ProfileTrace> traces;
  std::vector<db::PointRecord> points;
  for_each_profile(store, db_path, ids[0], point, [&](const db::PointRecord& p, const prof::ProfileTrace& t) {
    points.push_back(p);
    traces.push_back(t);
  });
  std::vector<perfetto::PointProfile> pp;
  for (std::size_t i = 0; i < points.size(); ++i)
    pp.push_back({points[i].index, "point " + std::to_string(points[i].index) + ": " + axes_text(points[i]), &traces[i]});
  std::ostringstream o;
  perfetto::write_trace(pp, o, time);
  write_output(output, o.str());
  if (!output.empty() && output != "-")
    std::fprintf(stderr, "exported %zu profiled point(s) of run %lld to %s (open it in ui.perfetto.dev)\n", pp.size(),
                 ids[0], output.c_str());
  return 0;
}

int cmd_export(const std::string& db_path, std::vector<long long> ids, bool all, const std::string& format,
               const std::string& output, std::optional<int> point, std::optional<prof::TimeMode> time) {
  if (format == "perfetto")
    return cmd_export_perfetto(db_path, ids, all, point, output, time.value_or(prof::TimeMode::exclusive));
  if (time) throw ConfigError("--time applies to --format perfetto only (csv and json export the timed metrics)");
  if (point) throw ConfigError("--point applies to --format perfetto only");
  const ExportFormat fmt = parse_format(format);
  auto store = db::ResultsDb::open(db_path, db::OpenMode::read_only);
  std::vector<std::int64_t> run_ids;
  if (all) {
    auto runs = store.runs();
    for (auto it = runs.rbegin(); it != runs.rend(); ++it) run_ids.push_back(it->id);  // oldest first
  } else {
    if (ids.empty()) throw ConfigError("name the runs to export (see `mocbench list`) or pass --all");
    for (auto id : ids) {
      if (!store.run(id)) throw ConfigError("no run " + std::to_string(id) + " in " + db_path + " (see `mocbench list`)");
      run_ids.push_back(id);
    }
  }
  std::ostringstream o;
  write_export(store, run_ids, fmt, o);
  write_output(output, o.str());
  if (!output.empty() && output != "-")
    std::fprintf(stderr, "exported %zu run(s) from %s to %s\n", run_ids.size(), db_path.c_str(), output.c_str());
  return 0;
}

int cmd_compare(const std::string& a, const std::string& b, const std::string& db_path,
                const std::vector<std::string>& metrics, const std::string& format, bool force) {
  const RunRef ra = parse_run_ref(a, db_path), rb = parse_run_ref(b, db_path);
  auto da = db::ResultsDb::open(ra.db_path, db::OpenMode::read_only);
  auto dbb = db::ResultsDb::open(rb.db_path, db::OpenMode::read_only);
  auto newest = [](const db::ResultsDb& d, const RunRef& r) {
    if (r.run_id) return *r.run_id;
    auto runs = d.runs();
    if (runs.empty()) throw ConfigError(d.path() + " holds no runs");
    return runs.front().id;
  };
  Comparison c;
  try {
    c = compare_runs(da, newest(da, ra), dbb, newest(dbb, rb), metrics, force);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
  std::ostringstream o;
  print_comparison(c, format.empty() ? ExportFormat::csv : parse_format(format), o, format.empty());
  std::fwrite(o.str().data(), 1, o.str().size(), stdout);
  return 0;
}

// `devices --measure`: each device's roofline ceilings measured now (and cached for the runs that follow).
void measure_devices(const std::vector<int>& gpus) {
  auto show = [](const std::string& what, const DeviceCeilings& c) {
    std::printf("  %s ceilings: copy %.0f GB/s (read + write), %s GEMM %.1f TFLOP/s\n", what.c_str(), c.copy_GBps,
                c.gemm_dtype.c_str(), c.gemm_tflops);
  };
  auto keep = [](const std::string& key, const DeviceCeilings& c) {
    std::string why;
    if (!store_ceilings(key, c, &why)) std::printf("  (not cached: %s)\n", why.c_str());
  };
  {
    auto cpu = make_cpu_ops();
    const DeviceCeilings c = measure_ceilings(*cpu);
    keep(ceilings_key("cpu", 0), c);
    show("cpu", c);
  }
#ifdef MOCBENCH_HAVE_CUDA
  for (int g : gpus) {
    auto ops = cuda::make_cuda_ops(g);
    const DeviceCeilings c = measure_ceilings(*ops);
    keep(ceilings_key("cuda", g), c);
    show("cuda:" + std::to_string(g), c);
  }
#else
  (void)gpus;
#endif
  std::printf("cached in %s\n", ceilings_cache_path().c_str());
}

int cmd_devices(bool measure) {
  std::printf("cpu: OpenBLAS fp32 reference backend (always available)\n");
  std::vector<int> gpu_ids;
#ifdef MOCBENCH_HAVE_CUDA
  std::string why;
  auto gpus = cuda::list_gpus(&why);
  if (gpus.empty()) std::printf("cuda: no GPU (%s)\n", why.c_str());
  for (const auto& g : gpus)
    std::printf("cuda:%d %s  sm_%d%d  %d SMs  %s HBM  L2 %s  SM clock %d MHz  mem clock %d MHz  bus %d bit  "
                "driver %d  runtime %d\n",
                g.index, g.name.c_str(), g.cc_major, g.cc_minor, g.sm_count,
                format_bytes(static_cast<std::int64_t>(g.total_mem_bytes)).c_str(),
                format_bytes(static_cast<std::int64_t>(g.l2_bytes)).c_str(), g.sm_clock_khz / 1000,
                g.mem_clock_khz / 1000, g.mem_bus_bits, g.driver_version, g.runtime_version);
  for (const auto& g : gpus) gpu_ids.push_back(g.index);
#else
  std::printf("cuda: not built (nvcc was not found at configure time)\n");
#endif
  if (measure) measure_devices(gpu_ids);
  return 0;
}
// `mocbench gui ...`: runs the dashboard binary that was built beside this one (the build tree's gui/ folder
// or the same folder), passing the arguments on. The dashboard links no CUDA and is a separate program.
int cmd_gui(const char* argv0, const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) self = fs::absolute(argv0, ec);
  const fs::path dir = self.parent_path();
  std::string found;
  for (const fs::path& p : {dir / "mocbench-gui", dir / ".." / "gui" / "mocbench-gui"})
    if (fs::exists(p, ec)) {
      found = p.lexically_normal().string();
      break;
    }
  if (found.empty()) {
    std::fprintf(stderr, "mocbench: the dashboard (mocbench-gui) was not built beside %s; run scripts/setup.sh (it "
                         "installs Dear ImGui/ImPlot/GLFW) and build again\n", self.string().c_str());
    return kExitRuntime;
  }
  std::vector<char*> av;
  av.push_back(found.data());
  std::vector<std::string> copy = args;
  for (auto& a : copy) av.push_back(a.data());
  av.push_back(nullptr);
  execv(found.c_str(), av.data());
  std::fprintf(stderr, "mocbench: cannot start %s: %s\n", found.c_str(), std::strerror(errno));
  return kExitRuntime;
}
int cmd_data(const moc::data::DataSpec& spec, const std::string& encode) {
  moc::data::PreparedData p;
  try {
    p = moc::data::prepare_data(spec, &std::cerr);
  } catch (const moc::data::DataError& e) {
    std::fprintf(stderr, "mocbench: %s\n", e.what());
    return kExitBadInput;
  }
  std::printf("corpus       %s (%s)\n", p.corpus_name.c_str(), p.licence.empty() ? "licence not recorded" : p.licence.c_str());
  std::printf("cache        %s%s\n", p.dir.c_str(), p.from_cache ? " (cached)" : "");
  std::printf("tokenizer    %s: %d pieces (SentencePiece BPE)\n", p.tokenizer_model.c_str(), p.tokenizer_vocab);
  std::printf("training     %d documents, %lld tokens\n", p.train_docs, static_cast<long long>(p.train_token_count));
  std::printf("validation   %d documents, %lld tokens\n", p.val_docs, static_cast<long long>(p.val_token_count));
  if (!encode.empty()) {
    const auto tok = moc::data::Tokenizer::load(p.tokenizer_model);
    const auto ids = tok.encode(encode);
    std::printf("ids          ");
    for (int id : ids) std::printf("%d ", id);
    std::printf("\ndecoded      %s\n", tok.decode(ids).c_str());
  }
  return 0;
}

// `mocbench keys [SECTION]`: the scenario key tables (app/scenario_keys.h), as text or as the markdown that
// scenarios/README.md holds.
int cmd_keys(const std::string& section, const std::string& format) {
  std::vector<moc::KeySection> sections;
  if (section.empty()) {
    sections.assign(std::begin(moc::kAllSections), std::end(moc::kAllSections));
  } else {
    moc::KeySection s{};
    if (!moc::parse_section(section, &s)) {
      std::fprintf(stderr, "mocbench: no section '%s'\n  hint: sections: top, model, measure, profile, data, axes\n",
                   section.c_str());
      return kExitBadInput;
    }
    sections.push_back(s);
  }
  for (std::size_t i = 0; i < sections.size(); ++i) {
    const moc::KeySection s = sections[i];
    const std::string head = s == moc::KeySection::top ? "top level" : "[" + std::string(moc::section_name(s)) + "]";
    if (format == "md") {
      std::printf("%s### %s\n\n%s", i ? "\n" : "", head.c_str(), moc::key_table_markdown(s).c_str());
      continue;
    }
    std::printf("%s%s\n", i ? "\n" : "", head.c_str());
    for (const auto& k : moc::scenario_keys(s)) {
      std::printf("  %-18s default: %s\n", k.name, k.fallback);
      // The documentation wrapped at word boundaries under the key.
      std::string line;
      std::istringstream words(k.doc);
      for (std::string w; words >> w;) {
        if (!line.empty() && line.size() + 1 + w.size() > 78) std::printf("    %s\n", line.c_str()), line.clear();
        line += (line.empty() ? "" : " ") + w;
      }
      if (!line.empty()) std::printf("    %s\n", line.c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mocbench: benchmark and profile Mixture-of-Channels FFNs against dense SwiGLU"};
  app.footer("Exit codes: 0 success; 1 runtime failure (a failed point, an unreadable database, a CUDA error);\n"
             "2 bad input (scenario errors, unknown runs, bad arguments); 130 a run stopped by Ctrl-C.");
  app.set_version_flag("--version", std::string(MOCBENCH_VERSION));
  app.require_subcommand(1);

  auto* smoke = app.add_subcommand("smoke", "Train a small model for a few steps on the CPU, then decode");
  std::string smoke_preset = "tiny";
  int smoke_batch = 4, smoke_seq = 16, smoke_steps = 50, smoke_gen = 16;
  std::vector<std::string> smoke_sets;
  smoke->add_option("--preset", smoke_preset, "Model preset")->capture_default_str();
  smoke->add_option("--batch", smoke_batch, "Batch size")->capture_default_str();
  smoke->add_option("--seq", smoke_seq, "Sequence length")->capture_default_str();
  smoke->add_option("--steps", smoke_steps, "Training steps")->capture_default_str();
  smoke->add_option("--gen", smoke_gen, "Tokens to generate after training")->capture_default_str();
  smoke->add_option("--set", smoke_sets, "Model override key=value (e.g. ffn=moc_2:8, k=0.2, gcp=true)");

  auto* mm = app.add_subcommand("memory-model", "Activation memory: the paper's model beside what mocbench keeps");
  std::string mm_preset = "1b", mm_ffn = "dense", mm_k;
  long mm_batch = 64, mm_seq = 256;
  bool mm_gcp = false;
  std::vector<std::string> mm_sets;
  mm->add_option("--preset", mm_preset, "Model preset")->capture_default_str();
  mm->add_option("--batch", mm_batch, "Batch size")->capture_default_str();
  mm->add_option("--seq", mm_seq, "Sequence length")->capture_default_str();
  mm->add_option("--ffn", mm_ffn, "dense | moc | moc_a:b")->capture_default_str();
  mm->add_option("--k", mm_k, "Kept channels (integer or fraction of d_ffn); default: the preset's K");
  mm->add_flag("--gcp", mm_gcp, "Gradient checkpointing of the FFN element-wise part");
  mm->add_option("--set", mm_sets, "Model override key=value");

  auto* dev = app.add_subcommand("devices", "List the backends and GPUs mocbench can use");
  bool dev_measure = false;
  dev->add_flag("--measure", dev_measure,
                "Also measure each device's roofline ceilings now (copy bandwidth, dense GEMM rate) and cache them "
                "for the runs that follow (each run records its device's, measuring once when none are cached)");

  auto* dat = app.add_subcommand("data", "Tokenize a corpus once into the token cache (what [data] training reads) "
                                         "and print its statistics; optionally encode / decode a text");
  moc::data::DataSpec dat_spec;
  dat_spec.corpus = "python3.11-doc";
  std::string dat_encode;
  dat->add_option("--corpus", dat_spec.corpus, "A named corpus (python3.11-doc) or a directory of text files")->capture_default_str();
  dat->add_option("--vocab", dat_spec.vocab, "Tokenizer vocabulary (the model's vocab)")->capture_default_str();
  dat->add_option("--val-fraction", dat_spec.val_fraction, "Documents held out for validation")->capture_default_str();
  dat->add_option("--seed", dat_spec.seed, "The split and the tokenizer's sampling")->capture_default_str();
  dat->add_option("--cache", dat_spec.cache_root, "Token cache directory (default: $MOCBENCH_DATA_CACHE or .local/data)");
  dat->add_option("--encode", dat_encode, "Also print the ids of this text and the text they decode to");

  auto* keys = app.add_subcommand("keys", "List the keys a scenario file may hold, by section: default and meaning");
  std::string keys_section, keys_format = "text";
  keys->add_option("SECTION", keys_section, "top | model | measure | profile | data | axes (default: every section)");
  keys->add_option("--format", keys_format, "text | md (the tables of scenarios/README.md)")
      ->check(CLI::IsMember({"text", "md"}))
      ->capture_default_str();

  auto* run = app.add_subcommand("run", "Run a scenario's sweep and store every point in the results database");
  std::string run_file;
  RunOptions run_opt;
  bool run_quiet = false, run_json = false;
  std::size_t run_mem_mib = 0;
  run->add_option("FILE", run_file, "Scenario file (TOML)")->required()->check(CLI::ExistingFile);
  run->add_option("--db", run_opt.db_path, "Results database")->capture_default_str();
  run->add_option("--device", run_opt.device, "auto | cpu | cuda (default: the scenario's)");
  run->add_flag("--dry-run", run_opt.dry_run, "Print the expanded points and exit");
  auto* q = run->add_flag("--quiet", run_quiet, "No progress or summary");
  run->add_flag("--json", run_json, "One JSON object per point on stdout")->excludes(q);
  run->add_option("--only", run_opt.only, "Run only the points with axis=value (repeatable, all must match)");
  // 1 MiB .. 2^40 MiB (1 EiB): a negative or larger value is refused, never wrapped into another limit.
  run->add_option("--cpu-memory-limit-mib", run_mem_mib, "CPU backend memory limit (points beyond it are stored as oom; default: the memory available less a margin)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 40));
  run->add_flag("--no-profile", run_opt.no_profile, "No profile pass, whatever the scenario's [profile] says");
  run->add_option("--gpus", run_opt.gpus,
                  "Run every train point data-parallel on N GPUs of this machine (one process each, NCCL; "
                  "docs/multi-gpu.md)")
      ->check(CLI::Range(1, 1024));
  run->add_option("--point", run_opt.point_index, "Only the point with this sweep index (the launcher's workers)")
      ->check(CLI::NonNegativeNumber)
      ->group("");

  std::string db_path = "mocbench.db";
  auto* list = app.add_subcommand("list", "List the runs in a results database");
  list->add_option("--db", db_path, "Results database")->capture_default_str();
  auto* show = app.add_subcommand("show", "Show a run's points and main metrics");
  long long show_run = 0;
  std::string show_format = "table";
  show->add_option("RUN", show_run, "Run id (see list)")->required();
  show->add_option("--format", show_format, "table | csv | json | markdown (markdown pastes into an issue or a paper draft)")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "csv", "json", "markdown", "md"}));
  show->add_option("--db", db_path, "Results database")->capture_default_str();

  auto* exp = app.add_subcommand("export", "Write runs as CSV or JSON (one row per point: run, device, mode, axes, "
                                           "metrics), or a run's profiles as a Perfetto trace");
  std::vector<long long> exp_runs;
  bool exp_all = false;
  std::string exp_format = "csv", exp_out;
  std::optional<int> exp_point;
  auto* exp_runs_opt = exp->add_option("RUN", exp_runs, "Run ids (see list)");
  exp->add_flag("--all", exp_all, "Every run in the database, oldest first")->excludes(exp_runs_opt);
  exp->add_option("--format", exp_format, "csv | json | perfetto (Chrome/Perfetto trace JSON of one run's profiles)")
      ->capture_default_str()
      ->check(CLI::IsMember({"csv", "json", "perfetto"}));
  exp->add_option("-o,--output", exp_out, "Output file (default: standard output)");
  exp->add_option("--point", exp_point, "perfetto: only this point (its sweep index)");
  std::optional<std::string> exp_time;
  exp->add_option("--time", exp_time,
                  "perfetto: exclusive (default: each kernel's slice is the time it alone accounts for; a PDL "
                  "kernel's wait for its predecessor is an argument) | inclusive (CUPTI's start to end)")
      ->check(CLI::IsMember({"exclusive", "inclusive"}));
  exp->add_option("--db", db_path, "Results database")->capture_default_str();

  auto* st = app.add_subcommand("stats", "Reports over a run's profiles, as `nsys stats` prints them");
  long long st_run = 0;
  std::optional<int> st_point;
  std::vector<std::string> st_reports;
  std::string st_format = "table";
  st->add_option("RUN", st_run, "Run id (see list)")->required();
  st->add_option("--point", st_point, "Only this point (its sweep index; default: every profiled point)");
  std::string report_help = "Report (repeatable): ";
  for (const auto& r : stats::report_names()) report_help += r + " ";
  report_help += "(default: cuda_gpu_kern_sum cuda_gpu_mem_time_sum nvtx_sum phase_sum, and stage_sum for a point "
                 "with stage stamps)";
  st->add_option("--report", st_reports, report_help);
  st->add_option("--format", st_format, "table | csv | json")->capture_default_str()->check(CLI::IsMember({"table", "csv", "json"}));
  std::string st_time = "exclusive";
  st->add_option("--time", st_time,
                 "Device time of each kernel, copy and set: exclusive (where records overlap -- a kernel launched "
                 "with programmatic dependent launch waiting for its predecessor -- the shared time counts once, for "
                 "the earlier record; a step's ops sum to its busy time) | inclusive (CUPTI's start to end)")
      ->capture_default_str()
      ->check(CLI::IsMember({"exclusive", "inclusive"}));
  st->add_option("--db", db_path, "Results database")->capture_default_str();

  auto* cmp = app.add_subcommand("compare", "Compare two runs of one scenario point by point (ratio = B / A)");
  std::string cmp_a, cmp_b, cmp_format;
  std::vector<std::string> cmp_metrics;
  bool cmp_force = false;
  cmp->add_option("A", cmp_a, "Baseline: RUN, FILE:RUN or FILE (its newest run)")->required();
  cmp->add_option("B", cmp_b, "Candidate: RUN, FILE:RUN or FILE (its newest run)")->required();
  cmp->add_option("--db", db_path, "Database for bare run ids")->capture_default_str();
  cmp->add_option("--metric", cmp_metrics, "Metric to compare (repeatable; default: the main ones)");
  cmp->add_option("--format", cmp_format, "csv | json instead of the table")->check(CLI::IsMember({"csv", "json"}));
  cmp->add_flag("--force", cmp_force, "Compare runs of different scenarios");

  auto* rep = app.add_subcommand("report", "Rebuild the paper's tables and figures from stored runs of the paper "
                                          "scenarios (scenarios/paper/), beside the paper's published A800 numbers");
  moc::PaperReportOptions rep_opt;
  std::vector<long long> rep_runs;
  rep->add_option("--db", rep_opt.db_paths, "Results database (repeatable; default: mocbench.db)");
  rep->add_option("--run", rep_runs, "Runs to report (repeatable, one database only; default: the newest run of "
                                     "each paper scenario in every database)");
  rep->add_option("-o,--output", rep_opt.out_dir, "Output folder: report.md, figures, data.json")->capture_default_str();
  rep->add_option("--python", rep_opt.python, "Python interpreter with matplotlib (default: $MOCBENCH_PYTHON, "
                                              "/usr/bin/python3, python3)");
  rep->add_flag("--require-figures", rep_opt.require_figures, "Fail when the figures cannot be drawn (no matplotlib)");

  auto* gui = app.add_subcommand("gui", "Open the dashboard (mocbench-gui) on results databases; the arguments after "
                                       "`gui` go to it (mocbench-gui --help lists them)");
  gui->prefix_command();  // everything after `gui` is the dashboard's, --help included

  // A first word that is no command is refused as such, --help or not (CLI11 would print the main help for
  // `mocbench eval --help` and exit 0, as if `eval` existed).
  if (argc > 1 && argv[1][0] != '-') {
    const std::string word = argv[1];
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      known = known || sub->check_name(word);
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "mocbench: '%s' is not a command\n  hint: the commands are %s (mocbench --help)\n",
                   word.c_str(), names.c_str());
      return kExitBadInput;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, version or the error with a hint
    return code == 0 ? 0 : kExitBadInput;
  }
  if (*gui) return cmd_gui(argv[0], gui->remaining());
  try {
    if (*smoke) return cmd_smoke(smoke_preset, smoke_batch, smoke_seq, smoke_steps, smoke_gen, smoke_sets);
    if (*mm) return cmd_memory_model(mm_preset, mm_batch, mm_seq, mm_ffn, mm_k, mm_gcp, mm_sets);
    if (*dev) return cmd_devices(dev_measure);
    if (*dat) return cmd_data(dat_spec, dat_encode);
    if (*keys) return cmd_keys(keys_section, keys_format);
    if (*run) {
      run_opt.output = run_json ? RunOptions::Output::json : run_quiet ? RunOptions::Output::quiet : RunOptions::Output::progress;
      run_opt.cpu_memory_limit_bytes = run_mem_mib << 20;
      return run_scenario_file(run_file, run_opt);
    }
    if (*list) return cmd_list(db_path);
    if (*show) return cmd_show(db_path, show_run, show_format);
    if (*exp) {
      std::optional<prof::TimeMode> time;
      if (exp_time) {
        time = prof::TimeMode::exclusive;
        prof::parse_time_mode(*exp_time, &*time);
      }
      return cmd_export(db_path, exp_runs, exp_all, exp_format, exp_out, exp_point, time);
    }
    if (*st) {
      prof::TimeMode time = prof::TimeMode::exclusive;
      prof::parse_time_mode(st_time, &time);
      return cmd_stats(db_path, st_run, st_point, st_reports, st_format, time);
    }
    if (*cmp) return cmd_compare(cmp_a, cmp_b, db_path, cmp_metrics, cmp_format, cmp_force);
    if (*rep) {
      if (rep_opt.db_paths.empty()) rep_opt.db_paths.push_back(db_path);
      for (long long r : rep_runs) rep_opt.run_ids.push_back(r);
      return moc::write_paper_report(rep_opt);
    }
  } catch (const moc::ConfigError& e) {
    std::fprintf(stderr, "mocbench: %s\n", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mocbench: error: %s\n", e.what());
    return kExitRuntime;
  }
  return 0;
}
