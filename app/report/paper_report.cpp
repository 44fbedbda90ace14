#include "app/report/paper_report.h"

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

#include <nlohmann/json.hpp>

#include "app/report/json_line.h"
#include "app/report/report.h"
#include "app/scenario/scenario.h"
#include "db/results_db.h"
#include "model/config.h"
#include "model/memory_model.h"

namespace moc {

namespace fs = std::filesystem;

namespace {

// Key order kept as written: the file is read by people and by scripts/paper_report.py.
using Json = nlohmann::ordered_json;

// The resolved model of a point, and for training points the memory model's estimate of a step's memory:
// weights, gradients and optimizer states of the precision mode, plus the activations the engine keeps
// (a lower bound of the peak: workspace is left out).
Json model_json(const ScenarioPoint& p) {
  ModelConfig c = p.model;
  if (p.precision == "bf16" || p.precision == "bf16-fp32master") c.param_dtype = c.act_dtype = DType::bf16;
  if (p.precision == "fp32") c.param_dtype = c.act_dtype = DType::f32;
  const double params = parameter_count(c);
  Json o{{"preset", c.preset},         {"hidden", c.hidden},
         {"d_ffn", c.d_ffn},           {"heads", c.heads},
         {"kv_heads", c.kv_heads},     {"layers", c.layers},
         {"vocab", c.vocab},           {"experts", c.experts},
         {"experts_per_token", c.experts_per_token}, {"qk_norm", c.qk_norm},
         {"ffn", c.ffn_name()},        {"kept", c.kept_channels()},
         {"act_bytes", dtype_bytes(c.act_dtype)}, {"param_bytes", dtype_bytes(c.param_dtype)},
         {"precision", p.precision},   {"parameters", params}};
  if (p.mode == "train") {
    const double pb = static_cast<double>(dtype_bytes(c.param_dtype));
    const bool master = p.precision == "bf16-fp32master";
    const double state = master ? 4.0 : pb;  // AdamW m and v (model/trainer.cpp)
    const double weights = params * pb, grads = params * pb, optimizer = params * (2 * state + (master ? 4.0 : 0.0));
    const double acts = engine_activation_model(c, p.batch, p.seq).total();
    o["estimate"] = Json{{"weights_bytes", weights},
                         {"gradients_bytes", grads},
                         {"optimizer_state_bytes", optimizer},
                         {"activations_bytes", acts},
                         {"total_bytes", weights + grads + optimizer + acts}};
  }
  return o;
}



}  // namespace

std::string paper_report_data(const std::vector<std::string>& db_paths, const std::vector<std::int64_t>& run_ids) {
  if (db_paths.empty()) throw ConfigError("report: no results database given");
  if (!run_ids.empty() && db_paths.size() > 1)
    throw ConfigError("report: --run needs exactly one --db (run ids are per database)");
  Json points = Json::array();
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
        Json axes = Json::object(), metrics = Json::object();
        for (const auto& [k, v] : p.axes) axes[k] = v;
        for (const auto& [k, v] : p.metrics) metrics[k] = v;  // NaN / inf: null
        Json e{{"db", path},
               {"run", run.id},
               {"scenario", run.scenario_name},
               {"run_status", run.status},
               {"device_kind", run.device_kind},
               {"device_name", run.device_name},
               {"mocbench_version", run.mocbench_version},
               {"started_unix_ms", run.started_unix_ms},
               {"point", p.index},
               {"status", p.status},
               {"mode", point_mode(run, p)},
               {"error", p.error},
               {"axes", std::move(axes)},
               {"metrics", std::move(metrics)}};
        if (p.index >= 0 && static_cast<std::size_t>(p.index) < expanded.size())
          e["model"] = model_json(expanded[static_cast<std::size_t>(p.index)]);
        points.push_back(std::move(e));
      }
    }
  }
  // One point per line; non-finite numbers are written as null.
  std::string out = "{\"points\": [";
  for (std::size_t i = 0; i < points.size(); ++i)
    out += (i ? ",\n" : "\n") + json_line(points[i]);
  return out + "\n]}\n";
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
