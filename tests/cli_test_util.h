// What the command-line tests share (test_cli*.cpp): the real executable run through a shell, a scratch folder per
// test, an RFC 4180 CSV reader and the smoke scenario.
#pragma once
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sqlite3.h>

#include "db/results_db.h"
#include "shell_util.h"


#ifdef MOCBENCH_BIN
namespace moc::clitest {

namespace fs = std::filesystem;

using Result = moc::test::ShellResult;

// Runs the executable with arguments (no shell quoting needed for the paths used here); stdout captured.
// env: "NAME=value ..." set for this command only ("" for none).
inline Result mocbench_env(const std::string& env, const std::string& args) {
  return moc::test::shell((env.empty() ? std::string() : "env " + env + " ") + std::string(MOCBENCH_BIN) + " " + args);
}

inline Result mocbench(const std::string& args) { return mocbench_env("", args); }

class Cli : public moc::test::ScratchDirTest {};

// RFC 4180: quoted cells may hold commas, quotes ("") and newlines.
inline std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string cell;
  bool quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') cell += '"', ++i;
      else if (c == '"') quoted = false;
      else cell += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().push_back(cell);
      cell.clear();
    } else if (c == '\n') {
      rows.back().push_back(cell);
      cell.clear();
      rows.emplace_back();
    } else {
      cell += c;
    }
  }
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

inline const std::string kSmoke = std::string(MOCBENCH_SOURCE_DIR) + "/scenarios/smoke_cpu.toml";

// Polls the results file db (every `poll`, 600 times at most) until run 1 holds `want` committed points, as a reader
// beside a running `mocbench run`; returns the last count seen (below want when it gave up).
inline std::size_t wait_for_committed_points(const std::string& db, std::size_t want, std::chrono::milliseconds poll) {
  std::size_t committed = 0;
  for (int i = 0; i < 600 && committed < want; ++i) {
    std::this_thread::sleep_for(poll);
    if (!fs::exists(db)) continue;
    try {
      auto store = db::ResultsDb::open(db, db::OpenMode::read_only);
      if (store.run(1)) committed = store.points(1).size();
    } catch (const db::DbError&) {
    }
  }
  return committed;
}

}  // namespace moc::clitest
#endif
