// `[model] weights = "file.safetensors"` (issue 14, part): decode and train points run on a checkpoint's
// weights; a checkpoint of another configuration fails its point with the reason (the sweep goes on); a
// missing file, or weights on a mode that cannot use them, is refused before any work.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "db/results_db.h"
#include "model/checkpoint.h"
#include "shell_util.h"

#ifdef MOCBENCH_BIN
namespace moc {
namespace {
namespace fs = std::filesystem;

using moc::test::shell;

TEST(WeightsScenario, DecodeAndTrainPointsRunOnACheckpointAndABadOneFailsItsPointOnly) {
  const fs::path dir = fs::temp_directory_path() / ("mocbench_weights_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto ops = make_cpu_ops();
  {
    Transformer tiny(*ops, preset("tiny")), gqa(*ops, preset("tiny-gqa"));
    save_checkpoint((dir / "tiny.safetensors").string(), tiny);
    save_checkpoint((dir / "gqa.safetensors").string(), gqa);
  }
  auto scenario = [&](const std::string& name, const std::string& weights, const std::string& mode) {
    const fs::path p = dir / (name + ".toml");
    std::ofstream(p) << "mode = \"" << mode << "\"\n[model]\npreset = \"tiny\"\nweights = \"" << weights
                     << "\"\n[measure]\nwarmup = 1\nmin_reps = 2\nmax_reps = 2\nprompt = 4\ngenerate = 4\n"
                        "[axes]\nffn = [\"dense\", \"moc\"]\nbatch = [2]\n";
    return p.string();
  };
  const std::string db = (dir / "w.db").string();
  for (const char* mode : {"decode", "train"}) {
    const auto ok = shell(std::string(MOCBENCH_BIN) + " run " + scenario(std::string("ok_") + mode, (dir / "tiny.safetensors").string(), mode) +
                       " --db " + db + " --quiet");
    EXPECT_EQ(ok.code, 0) << ok.out;
  }
  const auto bad = shell(std::string(MOCBENCH_BIN) + " run " + scenario("bad", (dir / "gqa.safetensors").string(), "decode") +
                      " --db " + db + " --quiet");
  EXPECT_EQ(bad.code, 1) << bad.out;
  auto store = db::ResultsDb::open(db, db::OpenMode::read_only);
  const auto runs = store.runs();  // newest first
  ASSERT_EQ(runs.size(), 3u);
  for (const auto& p : store.points(runs[0].id)) {
    EXPECT_EQ(p.status, "failed");
    EXPECT_NE(p.error.find("another model"), std::string::npos) << p.error;
  }
  for (const auto& p : store.points(runs[1].id)) EXPECT_EQ(p.status, "ok") << p.error;
  for (const auto& p : store.points(runs[2].id)) EXPECT_EQ(p.status, "ok") << p.error;
  // Refused before any work: a missing file, and weights on a mode that cannot use them.
  const auto missing = shell(std::string(MOCBENCH_BIN) + " run " + scenario("missing", (dir / "nope.safetensors").string(), "decode") +
                          " --db " + db + " --quiet");
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_NE(missing.out.find("no file"), std::string::npos) << missing.out;
  const auto mode = shell(std::string(MOCBENCH_BIN) + " run " + scenario("mode", (dir / "tiny.safetensors").string(), "ffn-decode") +
                       " --db " + db + " --quiet");
  EXPECT_EQ(mode.code, 2) << mode.out;
  EXPECT_NE(mode.out.find("apply to train, decode and eval"), std::string::npos) << mode.out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moc
#endif
