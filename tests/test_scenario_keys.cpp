// The scenario key tables (app/scenario/scenario_keys.h) are the one declaration of what a scenario file may say:
// scenarios/README.md shows them verbatim, the model keys are exactly what apply_override understands, and
// every [measure], [profile] and [data] key changes the point it is written for (a documented key that does
// nothing -- `[measure] steps` once was parsed, documented, set by nine scenarios and did nothing -- fails).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "app/scenario/scenario.h"
#include "app/scenario/scenario_keys.h"
#include "model/config.h"

namespace fs = std::filesystem;
using namespace moc;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A folder with two one-document corpora and an (empty) checkpoint file `resume` may name.
struct Files {
  fs::path dir;
  Files() {
    dir = fs::temp_directory_path() / ("mocbench_keys_" + std::to_string(::getpid()));
    fs::create_directories(dir / "c1");
    fs::create_directories(dir / "c2");
    std::ofstream(dir / "c1" / "a.txt") << "one document\n";
    std::ofstream(dir / "c2" / "a.txt") << "another document\n";
    std::ofstream(dir / "w.safetensors") << "";
    for (const char* t : {"t1.txt", "t2.txt"}) {  // token ids for eval points ([data] tokens)
      std::ofstream o(dir / t);
      for (int i = 0; i < 600; ++i) o << (i * 7 + (t[1] - '0')) % 512 << ' ';
    }
  }
  ~Files() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// A train point with [data] on the CPU, with `extra` lines added to the section named ([data] tokens: an eval
// point, which tokens feed, without the corpus).
std::string scenario(const Files& f, KeySection section, const std::string& extra) {
  std::string data = "corpus = \"" + (f.dir / "c1").string() + "\"\n";
  const bool tokens = section == KeySection::data && extra.starts_with("tokens");
  if (section == KeySection::data && (extra.starts_with("corpus") || tokens)) data.clear();
  return std::string("name = \"k\"\nmode = \"") + (tokens ? "eval" : "train") + "\"\ndevice = \"cpu\"\n[model]\npreset = \"tiny\"\nvocab = 512\nweights = \"" +
         (f.dir / "w.safetensors").string() + "\"\n[measure]\n" + (section == KeySection::measure ? extra : "") +
         "[profile]\n" + (section == KeySection::profile ? extra : "") + "[data]\n" + data +
         (section == KeySection::data ? extra : "");
}

std::string quoted(const fs::path& p) {
  std::string s = "\"";
  s += p.string();
  s += '"';
  return s;
}

// Values to try for a key, by its rule: at least one of them differs from any default.
std::vector<std::string> probes(const Files& f, KeyRule rule) {
  switch (rule) {
    case KeyRule::pos_int: return {"7", "9"};
    case KeyRule::nonneg_int: return {"0", "7"};
    case KeyRule::pos_number: return {"0.5", "0.25"};
    case KeyRule::nonneg_number: return {"0.0", "0.5"};
    case KeyRule::boolean: return {"true", "false"};
    case KeyRule::text: return {quoted(f.dir / "c2"), quoted(f.dir / "c1")};
    default: return {};
  }
}

bool same_settings(const ScenarioPoint& a, const ScenarioPoint& b) {
  return a.measure == b.measure && a.data == b.data && a.profile_kernels == b.profile_kernels &&
         a.profile_steps == b.profile_steps;
}

}  // namespace

TEST(ScenarioKeys, TheReadmeKeyTablesAreTheDeclaredTables) {
  const std::string readme = read_file(std::string(MOCBENCH_SOURCE_DIR) + "/scenarios/README.md");
  ASSERT_FALSE(readme.empty());
  for (KeySection s : kAllSections) {
    const std::string name(section_name(s));
    SCOPED_TRACE(name);
    const std::string open = "<!-- keys:" + name + " ";
    const auto at = readme.find(open);
    ASSERT_NE(at, std::string::npos) << "scenarios/README.md has no generated table for this section";
    EXPECT_EQ(readme.find(open, at + 1), std::string::npos) << "one table per section";
    const auto body = readme.find('\n', at) + 1;
    const auto close = readme.find("<!-- /keys -->", body);
    ASSERT_NE(close, std::string::npos);
    EXPECT_EQ(readme.substr(body, close - body), key_table_markdown(s))
        << "regenerate it: mocbench keys " << name << " --format md";
  }
}

TEST(ScenarioKeys, ModelKeysAreThePresetWeightsAndEveryOverrideKey) {
  std::vector<std::string> declared = scenario_key_names(KeySection::model);
  ASSERT_GE(declared.size(), 2u);
  EXPECT_EQ(declared[0], "preset");
  EXPECT_EQ(declared[1], "weights");
  declared.erase(declared.begin(), declared.begin() + 2);
  const std::vector<std::string> overrides = override_keys();
  EXPECT_EQ(std::set<std::string>(declared.begin(), declared.end()),
            std::set<std::string>(overrides.begin(), overrides.end()));
  EXPECT_EQ(declared.size(), overrides.size()) << "no key twice";
}

TEST(ScenarioKeys, EveryKeyIsDocumentedOnceWithAnExampleAndADefault) {
  for (KeySection s : kAllSections) {
    std::set<std::string> seen;
    for (const auto& k : scenario_keys(s)) {
      SCOPED_TRACE(std::string(section_name(s)) + "." + k.name);
      EXPECT_TRUE(seen.insert(k.name).second) << "declared twice";
      EXPECT_GT(std::string(k.doc).size(), 3u);
      EXPECT_FALSE(std::string(k.example).empty());
      EXPECT_FALSE(std::string(k.fallback).empty());
      const bool applied = s == KeySection::measure || s == KeySection::profile || s == KeySection::data;
      EXPECT_EQ(k.apply != nullptr, applied) << "[measure], [profile] and [data] keys say how they apply";
    }
  }
}

// Each key, set to values its rule accepts, is accepted and changes the expanded point: what a documented
// key says reaches what runs.
TEST(ScenarioKeys, EveryMeasureProfileAndDataKeyChangesTheExpandedPoint) {
  const Files f;
  for (KeySection s : {KeySection::measure, KeySection::profile, KeySection::data}) {
    const ScenarioPoint base = parse_scenario(scenario(f, s, ""), "base.toml").expand("cpu").at(0);
    for (const auto& k : scenario_keys(s)) {
      SCOPED_TRACE(std::string(section_name(s)) + "." + k.name);
      const auto values = std::string(k.name) == "tokens"
                              ? std::vector<std::string>{quoted(f.dir / "t1.txt"), quoted(f.dir / "t2.txt")}
                              : probes(f, k.rule);
      ASSERT_FALSE(values.empty()) << "no probe values for this key's rule";
      bool changed = false;
      for (const auto& v : values) {
        const std::string text = scenario(f, s, std::string(k.name) + " = " + v + "\n");
        std::vector<ScenarioPoint> pts;
        try {
          pts = parse_scenario(text, "probe.toml").expand("cpu");
        } catch (const ScenarioError& e) {
          ADD_FAILURE() << k.name << " = " << v << " was refused: " << e.what();
          continue;
        }
        ASSERT_EQ(pts.size(), 1u);
        changed = changed || !same_settings(pts[0], base);
      }
      EXPECT_TRUE(changed) << "setting it changed nothing in the point: a key that does nothing";
    }
  }
}

TEST(ScenarioKeys, ARetiredKeyIsRefusedWithItsReasonAndAnUnknownOneWithTheValidKeys) {
  const Files f;
  try {
    (void)parse_scenario(scenario(f, KeySection::measure, "steps = 10\n"), "r.toml");
    ADD_FAILURE() << "accepted";
  } catch (const ScenarioError& e) {
    EXPECT_NE(e.message.find("never changed what ran"), std::string::npos) << e.what();
  }
  try {
    (void)parse_scenario(scenario(f, KeySection::profile, "kernel = true\n"), "r.toml");
    ADD_FAILURE() << "accepted";
  } catch (const ScenarioError& e) {
    EXPECT_NE(e.message.find("did you mean 'kernels'"), std::string::npos) << e.what();
    EXPECT_EQ(e.hint, "valid keys in [profile]: kernels, steps");
  }
}
