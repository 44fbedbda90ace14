#include "app/paper_report.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "app/json_text.h"
#include "app/report.h"
#include "app/scenario.h"
#include "db/results_db.h"
#include "model/config.h"
#include "model/memory_model.h"

namespace moc {

namespace fs = std::filesystem;

namespace {

std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// The resolved model of a point, and for training points the memory model's estimate of a step's memory:
// weights, gradients and optimizer states of the precision mode, plus the activations the engine keeps
// (a lower bound of the peak: workspace is left out).
std::string model_json(const ScenarioPoint& p) {
  ModelConfig c = p.model;
  if (p.precision == "bf16" || p.precision == "bf16-fp32master") c.param_dtype = c.act_dtype = DType::bf16;
  if (p.precision == "fp32") c.param_dtype = c.act_dtype = DType::f32;
  std::ostringstream o;
  const double params = parameter_count(c);
  o << "{\"preset\": " << json_quote(c.preset) << ", \"hidden\": " << c.hidden << ", \"d_ffn\": " << c.d_ffn
    << ", \"heads\": " << c.heads << ", \"kv_heads\": " << c.kv_heads << ", \"layers\": " << c.layers
    << ", \"vocab\": " << c.vocab << ", \"experts\": " << c.experts << ", \"experts_per_token\": " << c.experts_per_token
    << ", \"qk_norm\": " << (c.qk_norm ? "true" : "false") << ", \"ffn\": " << json_quote(c.ffn_name())
    << ", \"kept\": " << c.kept_channels() << ", \"act_bytes\": " << dtype_bytes(c.act_dtype)
    << ", \"param_bytes\": " << dtype_bytes(c.param_dtype) << ", \"precision\": " << json_quote(p.precision)
    << ", \"parameters\": " << num(params);
  if (p.mode == "train") {
    const double pb = static_cast<double>(dtype_bytes(c.param_dtype));
    const bool master = p.precision == "bf16-fp32master";
    const double state = master ? 4.0 : pb;  // AdamW m and v (model/trainer.cpp)
    const double weights = params * pb, grads = params * pb, optimizer = params * (2 * state + (master ? 4.0 : 0.0));
    const double acts = engine_activation_model(c, p.batch, p.seq).total();
    o << ", \"estimate\": {\"weights_bytes\": " << num(weights) << ", \"gradients_bytes\": " << num(grads)
      << ", \"optimizer_state_bytes\": " << num(optimizer) << ", \"activations_bytes\": " << num(acts)
      << ", \"total_bytes\": " << num(weights + grads + optimizer + acts) << "}";
  }
  o << "}";
  return o.str();
}

std::string metric_text(double v) { return num(v); }

}  // namespace

std::string paper_report_data(const std::vector<std::string>& db_paths, const std::vector<std::int64_t>& run_ids) {
  if (db_paths.empty()) throw ConfigError("report: no results database given");
  if (!run_ids.empty() && db_paths.size() > 1)
    throw ConfigError("report: --run needs exactly one --db (run ids are per database)");
  std::ostringstream o;
  o << "{\"points\": [";
  bool first = true;
  for (const auto& path : db_paths) {
    auto store = db::ResultsDb::open(path, db::OpenMode::read_only);
    std::vector<db::RunRecord> runs;
    const auto all = store.runs();  // newest first
    if (!run_ids.empty()) {
      for (auto id : run_ids) {
        bool found = false;
        for (const auto& r : all)
          if (r.id == id) runs.push_back(r), found = true;
        if (!found) throw ConfigError("report: " + path + " has no run " + std::to_string(id));
      }
    } else {
      std::map<std::string, bool> seen;
      for (const auto& r : all)
        if (r.scenario_name.rfind(kPaperScenarioPrefix, 0) == 0 && !seen[r.scenario_name]) {
          seen[r.scenario_name] = true;
          runs.push_back(r);
        }
    }
    for (const auto& run : runs) {
      // Each point's resolved model, from the run's own scenario text (as it ran).
      std::vector<ScenarioPoint> expanded;
      try {
        expanded = parse_scenario(run.scenario_text, run.scenario_path).expand(run.device_kind);
      } catch (const std::exception&) {
        expanded.clear();  // an older scenario this build no longer reads: points without a model
      }
      for (const auto& p : store.points(run.id)) {
        o << (first ? "\n" : ",\n") << "{\"db\": " << json_quote(path) << ", \"run\": " << run.id
          << ", \"scenario\": " << json_quote(run.scenario_name) << ", \"run_status\": " << json_quote(run.status)
          << ", \"device_kind\": " << json_quote(run.device_kind) << ", \"device_name\": " << json_quote(run.device_name)
          << ", \"mocbench_version\": " << json_quote(run.mocbench_version) << ", \"started_unix_ms\": " << run.started_unix_ms
          << ", \"point\": " << p.index << ", \"status\": " << json_quote(p.status)
          << ", \"mode\": " << json_quote(point_mode(run, p)) << ", \"error\": " << json_quote(p.error) << ", \"axes\": {";
        first = false;
        for (std::size_t i = 0; i < p.axes.size(); ++i)
          o << (i ? ", " : "") << json_quote(p.axes[i].first) << ": " << json_quote(p.axes[i].second);
        o << "}, \"metrics\": {";
        for (std::size_t i = 0; i < p.metrics.size(); ++i)
          o << (i ? ", " : "") << json_quote(p.metrics[i].first) << ": " << metric_text(p.metrics[i].second);
        o << "}";
        if (p.index >= 0 && static_cast<std::size_t>(p.index) < expanded.size())
          o << ", \"model\": " << model_json(expanded[static_cast<std::size_t>(p.index)]);
        o << "}";
      }
    }
  }
  o << "\n]}\n";
  return o.str();
}

namespace {
// scripts/ and scenarios/paper/: the option, $MOCBENCH_SOURCE_DIR, the source tree this binary was built
// from, or the current directory.
std::string find_source_dir(const std::string& given) {
  std::vector<std::string> candidates;
  if (!given.empty()) candidates.push_back(given);
  if (const char* e = std::getenv("MOCBENCH_SOURCE_DIR")) candidates.emplace_back(e);
#ifdef MOCBENCH_SOURCE_DIR
  candidates.emplace_back(MOCBENCH_SOURCE_DIR);
#endif
  candidates.emplace_back(".");
  for (const auto& c : candidates)
    if (fs::exists(fs::path(c) / "scripts" / "paper_report.py")) return c;
  throw std::runtime_error("report: scripts/paper_report.py not found (looked in the source tree and the current "
                           "directory); run from the repository or set MOCBENCH_SOURCE_DIR");
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
}  // namespace

int write_paper_report(const PaperReportOptions& opt) {
  const std::string src = find_source_dir(opt.source_dir);
  fs::create_directories(opt.out_dir);
  const fs::path data = fs::path(opt.out_dir) / "data.json";
  {
    // Read everything first (a bad database fails here, before any file is touched), then write through a
    // temporary file renamed over data.json: an earlier report's data.json stays whole on every failure.
    const std::string text = paper_report_data(opt.db_paths, opt.run_ids);
    const fs::path tmp = data.string() + ".tmp." + std::to_string(::getpid());
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.flush();
    const bool ok = static_cast<bool>(f);
    f.close();
    std::error_code ec;
    if (ok) fs::rename(tmp, data, ec);
    if (!ok || ec) {
      fs::remove(tmp, ec);
      throw std::runtime_error("report: cannot write " + data.string() + " (nothing was changed there)");
    }
  }
  std::string py = opt.python;
  if (py.empty())
    if (const char* e = std::getenv("MOCBENCH_PYTHON")) py = e;
  if (py.empty()) py = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  const std::string cmd = shell_quote(py) + " " + shell_quote((fs::path(src) / "scripts" / "paper_report.py").string()) +
                          " --data " + shell_quote(data.string()) + " --paper " +
                          shell_quote((fs::path(src) / "scenarios" / "paper" / "paper_numbers.toml").string()) +
                          " -o " + shell_quote(opt.out_dir) + (opt.require_figures ? " --require-figures" : "");
  std::fflush(stdout);
  const int rc = std::system(cmd.c_str());
  if (rc == -1 || !WIFEXITED(rc)) {
    std::fprintf(stderr, "mocbench report: could not run %s\n", cmd.c_str());
    return 1;
  }
  return WEXITSTATUS(rc);
}

}  // namespace moc
