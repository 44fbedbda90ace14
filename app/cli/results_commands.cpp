// Readers of results databases: list, show, export (CSV, JSON, Perfetto), stats, compare, report, and gui
// (the dashboard, a separate program).
#include "app/cli/commands.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/report/json_line.h"
#include "app/report/paper_report.h"
#include "app/report/perfetto_export.h"
#include "app/report/profile_stats.h"
#include "app/report/report.h"
#include "app/report/summary.h"
#include "db/results_db.h"
#include "model/config.h"

namespace moc::cli {

namespace {

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
    if (defaults && !trace.stages.empty()) tables.push_back(stats::stage_sum(trace, p.metrics));
    if (format == "table" || format == "markdown") {
      char info[256];
      std::snprintf(info, sizeof info, "%s profile, %d step(s), %.1f kernels per step", trace.source.c_str(),
                    trace.steps, static_cast<double>(trace.kernels.size()) / std::max(1, trace.steps));
      o << "point " << p.index << ": " << axes_text(p) << " (mode " << (mode.empty() ? "?" : mode) << "; " << info
        << "; " << prof::time_mode_name(time) << " device time";
      if (trace.dropped_records) o << "; " << trace.dropped_records << " records dropped";
      o << ")\n" << (format == "table" ? "\n" : "");
      for (const auto& t : tables) {
        if (format == "table") stats::print_text(t, o);
        else report::print_markdown(t, o);
      }
      if (format == "markdown") o << "\n";
    } else if (format == "csv") {
      for (const auto& t : tables) {
        if (!first_block) o << "\n";
        first_block = false;
        stats::print_csv(t, o, {{"point", std::to_string(p.index)}, {"report", t.id}});
      }
    } else {
      // Each point's object through nlohmann-json; its reports are stats::print_json's objects.
      nlohmann::ordered_json axes = nlohmann::ordered_json::object(), reports_json = nlohmann::ordered_json::array();
      for (const auto& [k, v] : p.axes) axes[k] = v;
      for (const auto& t : tables) {
        std::ostringstream one;
        stats::print_json(t, one);
        reports_json.push_back(nlohmann::ordered_json::parse(one.str()));
      }
      const nlohmann::ordered_json pj{{"point", p.index},
                                      {"mode", mode},
                                      {"axes", std::move(axes)},
                                      {"source", trace.source},
                                      {"time", prof::time_mode_name(time)},
                                      {"steps", trace.steps},
                                      {"dropped_records", trace.dropped_records},
                                      {"reports", std::move(reports_json)}};
      o << (i ? ",\n " : "\n ") << json_line(pj);
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
  const ComparisonFormat f = format == "csv"        ? ComparisonFormat::csv
                             : format == "json"     ? ComparisonFormat::json
                             : format == "markdown" ? ComparisonFormat::markdown
                                                    : ComparisonFormat::table;
  print_comparison(c, f, o);
  std::fwrite(o.str().data(), 1, o.str().size(), stdout);
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

// list, show, export: the stored records as they are.
void add_listing_commands(CLI::App& app, std::vector<Command>& out) {
  {
    auto* c = app.add_subcommand("list", "List the runs in a results database");
    auto db = std::make_shared<std::string>("mocbench.db");
    c->add_option("--db", *db, "Results database")->capture_default_str();
    out.push_back({c, [db] { return cmd_list(*db); }});
  }
  {
    auto* c = app.add_subcommand("show", "Show a run's points and main metrics");
    struct O {
      std::string db = "mocbench.db", format = "table";
      long long run = 0;
    };
    auto o = std::make_shared<O>();
    c->add_option("RUN", o->run, "Run id (see list)")->required();
    c->add_option("--format", o->format, "table | csv | json | markdown (markdown pastes into an issue or a paper draft)")
        ->capture_default_str()
        ->check(CLI::IsMember({"table", "csv", "json", "markdown", "md"}));
    c->add_option("--db", o->db, "Results database")->capture_default_str();
    out.push_back({c, [o] { return cmd_show(o->db, o->run, o->format); }});
  }
  {
    auto* c = app.add_subcommand("export", "Write runs as CSV or JSON (one row per point: run, device, mode, axes, "
                                           "metrics), or a run's profiles as a Perfetto trace");
    struct O {
      std::vector<long long> runs;
      bool all = false;
      std::string db = "mocbench.db", format = "csv", out;
      std::optional<int> point;
      std::optional<std::string> time;
    };
    auto o = std::make_shared<O>();
    auto* runs = c->add_option("RUN", o->runs, "Run ids (see list)");
    c->add_flag("--all", o->all, "Every run in the database, oldest first")->excludes(runs);
    c->add_option("--format", o->format, "csv | json | perfetto (Chrome/Perfetto trace JSON of one run's profiles)")
        ->capture_default_str()
        ->check(CLI::IsMember({"csv", "json", "perfetto"}));
    c->add_option("-o,--output", o->out, "Output file (default: standard output)");
    c->add_option("--point", o->point, "perfetto: only this point (its sweep index)");
    c->add_option("--time", o->time,
                  "perfetto: exclusive (default: each kernel's slice is the time it alone accounts for; a PDL "
                  "kernel's wait for its predecessor is an argument) | inclusive (CUPTI's start to end)")
        ->check(CLI::IsMember({"exclusive", "inclusive"}));
    c->add_option("--db", o->db, "Results database")->capture_default_str();
    out.push_back({c, [o] {
                     std::optional<prof::TimeMode> time;
                     if (o->time) {
                       time = prof::TimeMode::exclusive;
                       prof::parse_time_mode(*o->time, &*time);
                     }
                     return cmd_export(o->db, o->runs, o->all, o->format, o->out, o->point, time);
                   }});
  }
}

// stats, compare, report: what the records say.
void add_analysis_commands(CLI::App& app, std::vector<Command>& out) {
  {
    auto* c = app.add_subcommand("stats", "Reports over a run's profiles, as `nsys stats` prints them");
    struct O {
      long long run = 0;
      std::optional<int> point;
      std::vector<std::string> reports;
      std::string db = "mocbench.db", format = "table", time = "exclusive";
    };
    auto o = std::make_shared<O>();
    c->add_option("RUN", o->run, "Run id (see list)")->required();
    c->add_option("--point", o->point, "Only this point (its sweep index; default: every profiled point)");
    std::string report_help = "Report (repeatable): ";
    for (const auto& r : stats::report_names()) report_help += r + " ";
    report_help += "(default: cuda_gpu_kern_sum cuda_gpu_mem_time_sum nvtx_sum phase_sum, and stage_sum for a point "
                   "with stage stamps)";
    c->add_option("--report", o->reports, report_help);
    c->add_option("--format", o->format, "table | markdown | csv | json")
        ->capture_default_str()
        ->check(CLI::IsMember({"table", "markdown", "csv", "json"}));
    c->add_option("--time", o->time,
                  "Device time of each kernel, copy and set: exclusive (where records overlap -- a kernel launched "
                  "with programmatic dependent launch waiting for its predecessor -- the shared time counts once, "
                  "for the earlier record; a step's ops sum to its busy time) | inclusive (CUPTI's start to end)")
        ->capture_default_str()
        ->check(CLI::IsMember({"exclusive", "inclusive"}));
    c->add_option("--db", o->db, "Results database")->capture_default_str();
    out.push_back({c, [o] {
                     prof::TimeMode time = prof::TimeMode::exclusive;
                     prof::parse_time_mode(o->time, &time);
                     return cmd_stats(o->db, o->run, o->point, o->reports, o->format, time);
                   }});
  }
  {
    auto* c = app.add_subcommand("compare", "Compare two runs of one scenario point by point (ratio = B / A)");
    struct O {
      std::string a, b, format = "table", db = "mocbench.db";
      std::vector<std::string> metrics;
      bool force = false;
    };
    auto o = std::make_shared<O>();
    c->add_option("A", o->a, "Baseline: RUN, FILE:RUN or FILE (its newest run)")->required();
    c->add_option("B", o->b, "Candidate: RUN, FILE:RUN or FILE (its newest run)")->required();
    c->add_option("--db", o->db, "Database for bare run ids")->capture_default_str();
    c->add_option("--metric", o->metrics, "Metric to compare (repeatable; default: the main ones)");
    c->add_option("--format", o->format, "table | markdown | csv | json")
        ->capture_default_str()
        ->check(CLI::IsMember({"table", "markdown", "csv", "json"}));
    c->add_flag("--force", o->force, "Compare runs of different scenarios");
    out.push_back({c, [o] { return cmd_compare(o->a, o->b, o->db, o->metrics, o->format, o->force); }});
  }
  {
    auto* c = app.add_subcommand("report", "Rebuild the paper's tables and figures from stored runs of the paper "
                                           "scenarios (scenarios/paper/), beside the paper's published A800 numbers");
    struct O {
      PaperReportOptions opt;
      std::vector<long long> runs;
    };
    auto o = std::make_shared<O>();
    c->add_option("--db", o->opt.db_paths, "Results database (repeatable; default: mocbench.db)");
    c->add_option("--run", o->runs, "Runs to report (repeatable, one database only; default: the newest run of "
                                    "each paper scenario in every database)");
    c->add_option("-o,--output", o->opt.out_dir, "Output folder: report.md, figures, data.json")->capture_default_str();
    c->add_option("--python", o->opt.python, "Python interpreter with matplotlib (default: $MOCBENCH_PYTHON, "
                                             "/usr/bin/python3, python3)");
    c->add_flag("--require-figures", o->opt.require_figures, "Fail when the figures cannot be drawn (no matplotlib)");
    out.push_back({c, [o] {
                     if (o->opt.db_paths.empty()) o->opt.db_paths.push_back("mocbench.db");
                     for (long long r : o->runs) o->opt.run_ids.push_back(r);
                     return write_paper_report(o->opt);
                   }});
  }
}

}  // namespace

void add_results_commands(CLI::App& app, std::vector<Command>& out) {
  add_listing_commands(app, out);
  add_analysis_commands(app, out);
}

Command add_gui_command(CLI::App& app, const char* argv0) {
  auto* c = app.add_subcommand("gui", "Open the dashboard (mocbench-gui) on results databases; the arguments after "
                                      "`gui` go to it (mocbench-gui --help lists them)");
  c->prefix_command();  // everything after `gui` is the dashboard's, --help included
  return {c, [c, argv0] { return cmd_gui(argv0, c->remaining()); }};
}

}  // namespace moc::cli
