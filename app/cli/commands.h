// The command line: each command is registered by its own function (its options, its help) and run by the
// function it returns; main.cpp parses and dispatches. Exit codes: 0 success, 1 runtime failure, 2 bad input.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <vector>

namespace moc::cli {

inline constexpr int kExitRuntime = 1;
inline constexpr int kExitBadInput = 2;

struct Command {
  CLI::App* sub = nullptr;
  std::function<int()> run;  // called when `sub` was parsed
};

// Engine commands (engine_commands.cpp): smoke, memory-model, devices, data, keys.
void add_engine_commands(CLI::App& app, std::vector<Command>& out);
// Published checkpoints (checkpoint_commands.cpp): eval, generate.
void add_eval_command(CLI::App& app, std::vector<Command>& out);
// The sweep (run_command.cpp): run.
void add_run_command(CLI::App& app, std::vector<Command>& out);
// Readers of results databases (results_commands.cpp): list, show, export, stats, compare, report. gui is
// returned apart: it runs before the other commands' error handling, as the dashboard's own process.
void add_results_commands(CLI::App& app, std::vector<Command>& out);
Command add_gui_command(CLI::App& app, const char* argv0);

}  // namespace moc::cli
