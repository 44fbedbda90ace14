// `mocbench report` end to end on the CPU: every paper scenario (scenarios/paper/*.toml, with their CPU
// overrides) runs into a fresh database through the real executable, then the report is written from it:
// every table's section is there with our numbers or marked "not measured", the paper numbers file parses,
// and the figures are PNG files with content (when matplotlib is there to draw them). An empty database
// gives a report whose every table says "not measured".
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "shell_util.h"

#if defined(MOCBENCH_BIN) && defined(MOCBENCH_SOURCE_DIR)
namespace moc {
namespace {
namespace fs = std::filesystem;

using moc::test::shell;

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

const char* kSections[] = {"§2 profiling", "Table 2:", "Figure 1:", "Table 3 (memory)", "Table 5 (memory)", "Table 6:",
                           "Table 7 (memory)", "Tables 8 and 11", "Table 9:", "Tables 10 and 14", "Table 12:",
                           "K ablation"};

std::string python() { return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3"; }
bool have_matplotlib() { return shell(python() + " -c 'import matplotlib'").code == 0; }

class PaperReport : public moc::test::ScratchDirTest {};

TEST_F(PaperReport, ThePaperNumbersFileParsesAndNamesItsTables) {
  const fs::path src(MOCBENCH_SOURCE_DIR);
  const auto r = shell(python() + " " + (src / "scripts/paper_report.py").string() + " --check-paper --paper " +
                    (src / "scenarios/paper/paper_numbers.toml").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("entries in"), std::string::npos) << r.out;
  // Every entry names the table of the paper it came from (its \label).
  const std::string text = read(src / "scenarios/paper/paper_numbers.toml");
  std::size_t entries = 0, labels = 0, pos = 0;
  while ((pos = text.find("[[number]]", pos)) != std::string::npos) ++entries, ++pos;
  pos = 0;
  while ((pos = text.find("\nlabel = \"", pos)) != std::string::npos) ++labels, ++pos;
  EXPECT_GT(entries, 50u);
  EXPECT_EQ(entries, labels);
}

TEST_F(PaperReport, EveryPaperScenarioRunsOnTheCpuAndTheReportFillsEveryTable) {
  const fs::path src(MOCBENCH_SOURCE_DIR);
  const std::string db = (dir_ / "paper.db").string();
  int scenarios = 0;
  for (const auto& e : fs::directory_iterator(src / "scenarios/paper")) {
    if (e.path().extension() != ".toml" || e.path().filename() == "paper_numbers.toml") continue;
    ++scenarios;
    const auto r = shell(std::string(MOCBENCH_BIN) + " run " + e.path().string() +
                      " --db " + db + " --quiet");
    EXPECT_EQ(r.code, 0) << e.path() << "\n" << r.out;
  }
  EXPECT_EQ(scenarios, 12);
  const fs::path out = dir_ / "report";
  const auto r = shell("cd " + src.string() + " && " + std::string(MOCBENCH_BIN) + " report --db " + db + " -o " +
                    out.string() + " --python " + python());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(out.string()), std::string::npos) << "report says where it wrote: " << r.out;
  const std::string md = read(out / "report.md");
  for (const char* s : kSections) EXPECT_NE(md.find(std::string("## ") + s), std::string::npos) << s;
  EXPECT_EQ(md.find("**Not measured**"), std::string::npos) << "every table has a run";
  EXPECT_NE(md.find("(cpu)"), std::string::npos) << "the device of our runs is named";
  EXPECT_NE(md.find("**not measured** at the paper's C4 scale"), std::string::npos)
      << "perplexity is marked as not measured";
  EXPECT_TRUE(fs::exists(out / "data.json"));
  // Written through temporary files, yet readable like any file the user writes (umask permitting).
  const mode_t um = ::umask(0);
  ::umask(um);
  if ((um & S_IROTH) == 0) {
    EXPECT_EQ(fs::status(out / "report.md").permissions() & fs::perms::others_read, fs::perms::others_read);
  }
  if (!have_matplotlib()) GTEST_SKIP() << "no matplotlib for " << python() << ": figures are listed as missing";
  int pngs = 0;
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().extension() == ".png") {
      ++pngs;
      EXPECT_GT(fs::file_size(e.path()), 5000u) << e.path();
      std::ifstream f(e.path(), std::ios::binary);
      char sig[8] = {};
      f.read(sig, 8);
      EXPECT_EQ(std::string(sig + 1, 3), "PNG") << e.path();
      EXPECT_NE(md.find("](" + e.path().filename().string() + ")"), std::string::npos) << "linked from report.md";
    }
  EXPECT_GE(pngs, 6);

  // A disk that fills up while the figures are drawn (a tmpfs with room for data.json and a page more): a
  // plain error naming the file and exit 1 -- no Python traceback -- and no temporary file left behind.
  const fs::path full = dir_ / "full";
  fs::create_directories(full);
  const auto kb = (fs::file_size(out / "data.json") + 4095) / 4096 * 4 + 8;
  if (shell("mount -t tmpfs -o size=" + std::to_string(kb) + "k tmpfs " + full.string()).code != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs here (needs root): the disk-full case is not checked";
  struct Unmount {
    fs::path p;
    ~Unmount() { shell("umount " + p.string()); }
  } unmount{full};
  const auto df = shell("cd " + src.string() + " && " + std::string(MOCBENCH_BIN) + " report --db " + db + " -o " +
                        (full / "r").string() + " --python " + python());
  EXPECT_EQ(df.code, 1) << df.out;
  EXPECT_NE(df.out.find("cannot write"), std::string::npos) << df.out;
  EXPECT_NE(df.out.find("No space left on device"), std::string::npos) << df.out;
  EXPECT_EQ(df.out.find("Traceback"), std::string::npos) << df.out;
  for (const auto& e : fs::directory_iterator(full / "r"))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST_F(PaperReport, AnEmptyDatabaseGivesEveryTableMarkedNotMeasured) {
  const fs::path src(MOCBENCH_SOURCE_DIR);
  const std::string db = (dir_ / "empty.db").string();
  // A database with one non-paper run only.
  const auto run = shell(std::string(MOCBENCH_BIN) + " run " + (src / "scenarios/smoke_cpu.toml").string() + " --db " + db +
                      " --quiet");
  ASSERT_EQ(run.code, 0) << run.out;
  const fs::path out = dir_ / "report";
  const auto r = shell(std::string(MOCBENCH_BIN) + " report --db " + db + " -o " + out.string() + " --python " + python());
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string md = read(out / "report.md");
  for (const char* s : kSections) {
    const auto at = md.find(std::string("## ") + s);
    ASSERT_NE(at, std::string::npos) << s;
    EXPECT_NE(md.find("**Not measured**", at), std::string::npos) << s;
  }
  // A run id the database lacks is bad input: refused with a message, exit 2 (README's exit codes).
  const auto bad = shell(std::string(MOCBENCH_BIN) + " report --db " + db + " --run 99 -o " + out.string());
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("no run 99"), std::string::npos) << bad.out;
  // A database that cannot be read: the earlier report's data.json stays whole, and nothing else is left.
  const std::string data_before = read(out / "data.json");
  ASSERT_FALSE(data_before.empty());
  const fs::path junk = dir_ / "junk.db";
  { std::ofstream(junk) << "not a database"; }
  const auto broken = shell(std::string(MOCBENCH_BIN) + " report --db " + junk.string() + " -o " + out.string());
  EXPECT_NE(broken.code, 0) << broken.out;
  EXPECT_EQ(read(out / "data.json"), data_before);
  for (const auto& e : fs::directory_iterator(out))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

// scripts/run_paper.sh runs every paper scenario -- not paper_numbers.toml, the published numbers beside them,
// which it once "ran" and so always exited 1. A stand-in mocbench records what it is asked to run.
TEST(RunPaperScript, RunsEveryScenarioButThePaperNumbersAndExits0) {
  const fs::path dir = fs::temp_directory_path() / ("mocbench_run_paper_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path fake = dir / "mocbench", log = dir / "log";
  {
    std::ofstream f(fake);
    f << "#!/bin/sh\necho \"$@\" >> " << log.string() << "\nexit 0\n";
  }
  fs::permissions(fake, fs::perms::owner_all);
  const auto r = shell(std::string(MOCBENCH_SOURCE_DIR) + "/scripts/run_paper.sh " + (dir / "p.db").string() + " " +
                       fake.string());
  EXPECT_EQ(r.code, 0) << r.out;
  std::ifstream in(log);
  std::string line, all;
  int runs = 0;
  while (std::getline(in, line)) {
    all += line + "\n";
    if (line.rfind("run ", 0) == 0) ++runs;
  }
  EXPECT_EQ(all.find("paper_numbers.toml"), std::string::npos) << all;
  EXPECT_NE(all.find("table9_decode.toml"), std::string::npos) << all;
  int scenarios = 0;
  for (const auto& e : fs::directory_iterator(std::string(MOCBENCH_SOURCE_DIR) + "/scenarios/paper"))
    if (e.path().extension() == ".toml" && e.path().filename() != "paper_numbers.toml") ++scenarios;
  EXPECT_EQ(runs, scenarios) << all;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moc
#endif
