// Refusal of what is not a results file of ours, the file untouched: a newer or negative schema version, text,
// another application's SQLite file, garbage, damage, truncation; a file with several names refused for writing; a
// file in a folder the reader cannot write opened read-only.
#include <gtest/gtest.h>

#include "db_test_util.h"

namespace {

using namespace moc::dbtest;

// A results file with one run of one profiled point (the files the refusal tests then damage or cut).
void write_one_profiled_point(const std::string& path) {
  auto db = ResultsDb::open(path, OpenMode::read_write);
  const auto run = db.begin_run(sample_run());
  const auto trace = sample_trace(2000);
  db.add_point(sample_point(run, 0), sample_ranges(), sample_mem(), &trace);
}

TEST_F(ResultsDbRefusal, NewerSchemaIsRefusedNamingItsVersionAndFileIsUntouched) {
  const auto path = file("newer.db");
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    db.begin_run(sample_run());
  }
  RawDb(path).exec("PRAGMA user_version = " + std::to_string(moc::db::kSchemaVersion + 1));
  expect_refused(path, "schema version " + std::to_string(moc::db::kSchemaVersion + 1));
  expect_refused(path, "Upgrade mocbench");
}

// Found by fuzzing: opened for writing, a negative version was "migrated" from, indexing the migrations out
// of bounds. It is refused as corrupt in both modes, the file untouched.
TEST_F(ResultsDbRefusal, NegativeSchemaVersionIsRefusedAsCorruptAndFileIsUntouched) {
  const auto path = file("negative.db");
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    db.begin_run(sample_run());
  }
  RawDb(path).exec("PRAGMA user_version = -1");
  expect_refused(path, "corrupt or truncated (its schema version is -1");
}

TEST_F(ResultsDbRefusal, TextFileIsRefusedAndUntouched) {
  const auto path = file("scenario.toml");
  write_bytes(path, "[model]\npreset = \"tiny\"\nbatch = [1, 4]\n# a scenario, not a results database\n"
                    "seq = [128, 256, 512, 1024, 2048, 4096]\nffn = [\"dense\", \"moc\"]\n");
  expect_refused(path, "not a mocbench results database");
}

TEST_F(ResultsDbRefusal, SqliteFileOfAnotherApplicationIsRefusedAndUntouched) {
  const auto path = file("other.db");
  {
    RawDb raw(path);
    raw.exec("PRAGMA application_id = 305419896; CREATE TABLE runs (x); INSERT INTO runs VALUES (1);");
  }
  expect_refused(path, "another application");
}

TEST_F(ResultsDbRefusal, SqliteFileWithUnrelatedTablesIsRefusedAndUntouched) {
  const auto path = file("unrelated.db");
  RawDb(path).exec("CREATE TABLE invoices (id INTEGER PRIMARY KEY, amount REAL); INSERT INTO invoices VALUES (1, 9.5);");
  expect_refused(path, "not a mocbench results database");
  expect_refused(path, "invoices");
}

TEST_F(ResultsDbRefusal, GarbageBytesAreRefusedAndUntouched) {
  const auto path = file("garbage.db");
  std::string bytes(8192, '\0');
  std::uint32_t x = 12345;
  for (auto& b : bytes) b = static_cast<char>((x = x * 1103515245u + 12345u) >> 24);
  write_bytes(path, bytes);
  expect_refused(path, "not a mocbench results database");
}

// Issue 27: damage in the middle of a file whose header and schema are intact. A writer measured and then
// wrote a new run into it; now opening it for writing is refused (quick_check), the file untouched, while a
// reader still opens it.
TEST_F(ResultsDbRefusal, DamageInTheMiddleIsRefusedForWritingAndTheFileStaysReadable) {
  const auto path = file("damaged.db");
  write_one_profiled_point(path);
  std::string bytes = read_bytes(path);
  const std::size_t page = 4096;
  ASSERT_GT(bytes.size(), 8 * page);
  // A page in the middle overwritten with noise: the header (page 1) and the schema stay intact.
  const std::size_t at = (bytes.size() / page / 2) * page;
  std::uint32_t x = 777;
  for (std::size_t i = at; i < at + page; ++i) bytes[i] = static_cast<char>((x = x * 1103515245u + 12345u) >> 24);
  write_bytes(path, bytes);
  try {
    ResultsDb::open(path, OpenMode::read_write);
    ADD_FAILURE() << "opened a damaged file for writing";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("is damaged"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_bytes(path), bytes) << "a refused open changed the file";
  EXPECT_NO_THROW(ResultsDb::open(path, OpenMode::read_only));
  EXPECT_EQ(read_bytes(path), bytes);
}

// Issue 27: two writers through two hard links of one file both "stored run 2" and one run was lost (each
// name gets its own -wal). A file with several names is refused for writing, untouched; readers open it.
TEST_F(ResultsDbRefusal, AFileWithSeveralNamesIsRefusedForWritingAndReadThroughAny) {
  const auto path = file("one.db"), second = file("two.db");
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    db.begin_run(sample_run());
  }
  std::filesystem::create_hard_link(path, second);
  const std::string before = read_bytes(path);
  for (const auto& name : {path, second}) {
    SCOPED_TRACE(name);
    try {
      ResultsDb::open(name, OpenMode::read_write);
      ADD_FAILURE() << "opened a file with two names for writing";
    } catch (const DbError& e) {
      EXPECT_NE(std::string(e.what()).find("2 names (hard links)"), std::string::npos) << e.what();
    }
    auto r = ResultsDb::open(name, OpenMode::read_only);
    EXPECT_EQ(r.runs().size(), 1u);
  }
  EXPECT_EQ(read_bytes(path), before);
  std::filesystem::remove(second);
  EXPECT_NO_THROW(ResultsDb::open(path, OpenMode::read_write)) << "one name again: writable";
}

// Issue 27: a results file in a folder the reader cannot write (a read-only share or mount, another user's
// folder) could not be listed, shown or opened by the dashboard: SQLite could not create the -shm a WAL
// reader needs. It now opens read-only as it is. Checked as another user when the tests run as root (root
// writes everywhere), else with the folder made read-only.
TEST_F(ResultsDbRefusal, AFileInAFolderTheReaderCannotWriteOpensReadOnly) {
  const std::filesystem::path dir = file("shared");
  std::filesystem::create_directory(dir);
  const std::string path = (dir / "results.db").string();
  {
    auto db = ResultsDb::open(path, OpenMode::read_write);
    db.begin_run(sample_run());
  }
  ASSERT_FALSE(std::filesystem::exists(path + "-shm")) << "a closed writer leaves no -shm";
  auto read_as_reader = [&]() -> int {
    try {
      auto r = ResultsDb::open(path, OpenMode::read_only);
      return r.runs().size() == 1 ? 0 : 3;
    } catch (const DbError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 4;
    }
  };
  const std::string before = read_bytes(path);
  if (::geteuid() == 0) {
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                          std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                          std::filesystem::perms::others_exec);
    ::chmod(path.c_str(), 0644);
    // The temp folder's parents must be searchable by that user too (they are: /tmp is world-searchable).
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(5);
      _exit(read_as_reader());
    }
    int st = 0;
    ASSERT_EQ(waitpid(child, &st, 0), child);
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 0) << "the reader (uid 65534) could not open the file";
  } else {
    std::filesystem::permissions(dir, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    EXPECT_EQ(read_as_reader(), 0);
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
  }
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_FALSE(std::filesystem::exists(path + "-shm")) << "nothing was created beside it";
}

TEST_F(ResultsDbRefusal, TruncatedFileIsRefusedAndUntouched) {
  const auto path = file("results.db");
  write_one_profiled_point(path);
  const std::string whole = read_bytes(path);
  const std::size_t page = 4096;
  ASSERT_GT(whole.size(), 8 * page) << "the fixture should span many pages";
  const std::vector<std::pair<std::string, std::size_t>> cuts = {
      {"mid-page", whole.size() / 2 + 100}, {"at a page boundary", (whole.size() / page / 2) * page}, {"in the header", 60}};
  for (const auto& [where, size] : cuts) {
    SCOPED_TRACE(where);
    write_bytes(path, whole.substr(0, size));
    expect_refused(path, "corrupt or truncated");
  }
}

}  // namespace
