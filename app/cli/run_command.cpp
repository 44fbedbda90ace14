// `mocbench run FILE`: a scenario's sweep, every point stored in the results database (app/harness/runner.h).
#include <memory>
#include <string>

#include "app/cli/commands.h"
#include "app/harness/runner.h"

namespace moc::cli {

void add_run_command(CLI::App& app, std::vector<Command>& out) {
  auto* c = app.add_subcommand("run", "Run a scenario's sweep and store every point in the results database");
  struct O {
    std::string file;
    RunOptions opt;
    bool quiet = false, json = false;
    std::size_t mem_mib = 0;
  };
  auto o = std::make_shared<O>();
  c->add_option("FILE", o->file, "Scenario file (TOML)")->required()->check(CLI::ExistingFile);
  c->add_option("--db", o->opt.db_path, "Results database")->capture_default_str();
  c->add_option("--device", o->opt.device, "auto | cpu | cuda (default: the scenario's)");
  c->add_flag("--dry-run", o->opt.dry_run, "Print the expanded points and exit");
  auto* q = c->add_flag("--quiet", o->quiet, "No progress or summary");
  c->add_flag("--json", o->json, "One JSON object per point on stdout")->excludes(q);
  c->add_option("--only", o->opt.only,
                "Run only the points with axis=value; axis=v1,v2 (or the axis given again): any of those values; "
                "different axes must all match");
  // 1 MiB .. 2^40 MiB (1 EiB): a negative or larger value is refused, never wrapped into another limit.
  c->add_option("--cpu-memory-limit-mib", o->mem_mib,
                "CPU backend memory limit (points beyond it are stored as oom; default: the memory available less "
                "a margin)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 40));
  c->add_flag("--no-profile", o->opt.no_profile, "No profile pass, whatever the scenario's [profile] says");
  c->add_option("--gpus", o->opt.gpus,
                "Run every train point data-parallel on N GPUs of this machine (one process each, NCCL; "
                "docs/multi-gpu.md)")
      ->check(CLI::Range(1, 1024));
  c->add_option("--point", o->opt.point_index, "Only the point with this sweep index (the launcher's workers)")
      ->check(CLI::NonNegativeNumber)
      ->group("");
  out.push_back({c, [o] {
                   o->opt.output = o->json    ? RunOptions::Output::json
                                   : o->quiet ? RunOptions::Output::quiet
                                              : RunOptions::Output::progress;
                   o->opt.cpu_memory_limit_bytes = o->mem_mib << 20;
                   return run_scenario_file(o->file, o->opt);
                 }});
}

}  // namespace moc::cli
