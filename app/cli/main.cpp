// mocbench's command line: every command registered (app/cli/*_commands.cpp), the arguments parsed, the one
// command given run. Exit codes: 0 success, 1 runtime failure, 2 bad input (config/arguments).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "app/cli/commands.h"
#include "model/config.h"

#ifndef MOCBENCH_VERSION
#define MOCBENCH_VERSION "unknown"
#endif

namespace {

using namespace moc::cli;

// A first word that is no command is refused as such, --help or not (CLI11 would print the main help for
// `mocbench frobnicate --help` and exit 0, as if it existed). Returns false when it was refused.
bool first_word_is_a_command(const CLI::App& app, int argc, char** argv) {
  if (argc <= 1 || argv[1][0] == '-') return true;
  const std::string word = argv[1];
  std::string names;
  bool known = false;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    known = known || sub->check_name(word);
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  if (!known)
    std::fprintf(stderr, "mocbench: '%s' is not a command\n  hint: the commands are %s (mocbench --help)\n",
                 word.c_str(), names.c_str());
  return known;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mocbench: benchmark and profile Mixture-of-Channels FFNs against dense SwiGLU"};
  app.footer("Exit codes: 0 success; 1 runtime failure (a failed point, an unreadable database, a CUDA error);\n"
             "2 bad input (scenario errors, unknown runs, bad arguments); 130 a run stopped by Ctrl-C.");
  app.set_version_flag("--version", std::string(MOCBENCH_VERSION));
  app.require_subcommand(1);

  std::vector<Command> commands;
  add_engine_commands(app, commands);
  add_eval_command(app, commands);
  add_run_command(app, commands);
  add_results_commands(app, commands);
  const Command gui = add_gui_command(app, argv[0]);

  if (!first_word_is_a_command(app, argc, argv)) return kExitBadInput;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, version or the error with a hint
    return code == 0 ? 0 : kExitBadInput;
  }
  if (*gui.sub) return gui.run();
  try {
    for (const auto& c : commands)
      if (*c.sub) return c.run();
  } catch (const moc::ConfigError& e) {
    std::fprintf(stderr, "mocbench: %s\n", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mocbench: error: %s\n", e.what());
    return kExitRuntime;
  }
  return 0;
}
