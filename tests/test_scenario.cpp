// Scenario files: every problem is refused up front with file:line:col and a hint, and a valid file
// expands into the points the study asks for, per backend.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>

#include "app/scenario/scenario.h"

namespace moc {
namespace {

const std::string kFile = "study.toml";

// The problem parse_scenario reports, or nullopt when it accepts the text.
std::optional<ScenarioError> refusal(const std::string& text) {
  try {
    parse_scenario(text, kFile);
  } catch (const ScenarioError& e) {
    return e;
  }
  return std::nullopt;
}

// Asserts the text is refused at line:col (col 0 = any) with a message and hint containing the fragments.
void expect_refused(const std::string& text, int line, int col, const std::string& message_part,
                    const std::string& hint_part = "") {
  SCOPED_TRACE(text);
  const auto e = refusal(text);
  ASSERT_TRUE(e.has_value()) << "accepted";
  const std::string what = e->what();
  EXPECT_EQ(e->file, kFile);
  EXPECT_EQ(e->line, line) << what;
  if (col > 0) {
    EXPECT_EQ(e->col, col) << what;
  }
  EXPECT_NE(e->message.find(message_part), std::string::npos) << what;
  if (!hint_part.empty()) {
    EXPECT_NE(e->hint.find(hint_part), std::string::npos) << what;
  }
  // what() leads with the position, so editors and terminals can jump to it.
  const std::string where = kFile + ":" + std::to_string(e->line) + (e->col > 0 ? ":" + std::to_string(e->col) : "");
  EXPECT_EQ(what.rfind(where + ": ", 0), 0u) << what;
  EXPECT_NE(what.find("\n  hint: "), std::string::npos) << what;
}

// A valid scenario; tests append or splice lines. Line numbers: [axes] is line 5, batch line 6.
const std::string kBase =
    "name = \"t\"\n"           // 1
    "mode = \"ffn-decode\"\n"  // 2
    "[model]\n"                // 3
    "preset = \"tiny\"\n"      // 4
    "[axes]\n"                 // 5
    "batch = [1, 2]\n";        // 6

std::filesystem::path scenarios_dir() {
  return std::filesystem::path(__FILE__).parent_path().parent_path() / "scenarios";
}

std::vector<std::string> axis_values(const std::vector<ScenarioPoint>& pts, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& p : pts) {
    const std::string* v = p.axis(name);
    out.push_back(v ? *v : "-");
  }
  return out;
}

TEST(ScenarioParse, AValidFileKeepsItsNameTextAndAStableHash) {
  const Scenario a = parse_scenario(kBase, kFile);
  EXPECT_EQ(a.name, "t");
  EXPECT_EQ(a.path, kFile);
  EXPECT_EQ(a.text, kBase);
  EXPECT_EQ(a.device, "auto");
  ASSERT_EQ(a.hash.size(), 16u);
  EXPECT_EQ(a.hash, parse_scenario(kBase, "elsewhere.toml").hash) << "the hash is of the text, not the path";
  EXPECT_NE(a.hash, parse_scenario(kBase + "seq = [8]\n", kFile).hash);
  EXPECT_EQ(parse_scenario("mode = \"topk\"\n[model]\npreset = \"tiny\"\n", "dir/my_study.toml").name, "my_study")
      << "a scenario without a name is named after its file";
}

TEST(ScenarioErrors, TomlSyntaxErrorsGiveFileLineAndColumn) {
  expect_refused(kBase + "seq = [1, 2\n", 7, 0, "TOML syntax error", "brackets");
  expect_refused("name = \"t\"\nmode = decode\n", 2, 8, "TOML syntax error", "quotes");
  expect_refused(kBase + "batch = [3]\n", 7, 0, "TOML syntax error", "once");
}

TEST(ScenarioErrors, UnknownAxisSuggestsTheNearestValidKey) {
  const std::string text = kBase + "bacth = [1]\n";
  const auto e = refusal(text);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message, "unknown key 'bacth' in [axes]; did you mean 'batch'?");
  EXPECT_EQ(e->line, 7);
  EXPECT_EQ(e->col, 1);
  EXPECT_NE(e->hint.find("topk_position"), std::string::npos) << "the hint lists the valid keys";
  EXPECT_EQ(std::string(e->what()),
            "study.toml:7:1: unknown key 'bacth' in [axes]; did you mean 'batch'?\n  hint: " + e->hint);
}

TEST(ScenarioErrors, UnknownKeysAreRefusedAtEveryLevel) {
  expect_refused("naem = \"x\"\n" + kBase, 1, 1, "unknown key 'naem' at the top level; did you mean 'name'?");
  expect_refused(kBase + "[model]\n", 7, 0, "TOML syntax error");  // a table twice is TOML's error
  expect_refused("mode = \"decode\"\n[model]\npreset = \"tiny\"\nlayres = 2\n", 4, 1,
                 "unknown key 'layres' in [model]; did you mean 'layers'?", "kv_heads");
  expect_refused(kBase + "[measure]\nmin_rep = 2\n", 8, 1,
                 "unknown key 'min_rep' in [measure]; did you mean 'min_reps'?");
  expect_refused(kBase + "[[exclude]]\nbatchh = 1\n", 8, 1,
                 "unknown key 'batchh' in [[exclude]]; did you mean 'batch'?");
  expect_refused(kBase + "[[include]]\nbtch = 8\n", 8, 1, "unknown key 'btch' in [[include]]; did you mean 'batch'?");
  expect_refused(kBase + "[overrides.cpu]\nmodle = { preset = \"tiny\" }\n", 8, 1,
                 "unknown key 'modle' in [overrides.cpu]; did you mean 'model'?", "measure");
  expect_refused(kBase + "[overrides.cpu]\nmeasure = { wamrup = 1 }\n", 8, 13,
                 "unknown key 'wamrup' in [overrides.cpu].measure; did you mean 'warmup'?");
  expect_refused(kBase + "[overrides.cpu]\naxes = { bath = [1] }\n", 8, 10, "did you mean 'batch'?");
  // Names that mean the same thing elsewhere lead to the right one.
  expect_refused(kBase + "select = [\"gate\"]\n", 7, 1, "did you mean 'topk_position'?");
}

TEST(ScenarioErrors, OverridesForAnUnknownBackendAreRefused) {
  expect_refused(kBase + "[overrides.gpu]\n", 7, 12, "unknown backend 'gpu' in [overrides]; did you mean 'cuda'?",
                 "cpu, cuda");
  expect_refused(kBase + "[overrides.rocm]\n", 7, 12, "unknown backend 'rocm'", "cpu, cuda");
}

TEST(ScenarioErrors, WrongTypesNameTheExpectedType) {
  expect_refused(kBase + "seq = \"two\"\n", 7, 7, "seq in [axes]: expected a positive integer, got string \"two\"",
                 "seq = 256");
  expect_refused(kBase + "gcp = [false, 3]\n", 7, 15, "gcp in [axes]: expected true or false, got integer 3");
  expect_refused(kBase + "[measure]\ncold = \"yes\"\n", 8, 8, "expected true or false");
  expect_refused(kBase + "[measure]\ntime_bound_s = \"10\"\n", 8, 16, "expected a positive number");
  expect_refused("model = 3\n", 1, 9, "[model] must be a table, got integer 3");
  expect_refused(kBase + "[exclude]\nbatch = 1\n", 7, 1, "exclude must be an array of tables", "[[exclude]]");
  expect_refused(kBase + "[[include]]\nbatch = [8, 16]\n", 8, 9, "an include adds one point");
  expect_refused(kBase + "k = [\"all\"]\n", 7, 6, "expected an integer or a fraction of d_ffn");
}

// A sweep too large to hold is refused before it is built, at its longest axis (found by fuzzing: 563 bytes
// of axes asked for 640,000 points and 600 MB; a little more asks for billions).
TEST(ScenarioErrors, ASweepBeyondTheBoundIsRefusedBeforeItIsBuilt) {
  auto values = [](int n) {
    std::string v = "[";
    for (int i = 1; i <= n; ++i) v += (i > 1 ? ", " : "") + std::to_string(i);
    return v + "]";
  };
  expect_refused(kBase + "seq = " + values(40) + "\nlayers = " + values(300) + "\n", 8, 1,
                 "the sweep has 24000 points for backend", "the longest, 'layers', has 300 values");
  // Billions of points: refused just as fast, the count still exact.
  expect_refused(kBase + "seq = " + values(1000) + "\nlayers = " + values(1000) + "\nhidden = " + values(1000) + "\n", 7, 1,
                 "the sweep has 2000000000 points");
  // At the bound it expands.
  EXPECT_FALSE(refusal(kBase + "seq = " + values(50) + "\nlayers = " + values(100) + "\n").has_value());
}

TEST(ScenarioErrors, ImpossibleValuesAreRefusedWhereTheyAreWritten) {
  expect_refused(kBase + "seq = [16, 0]\n", 7, 12, "seq in [axes] must be positive, got 0");
  expect_refused("mode = \"decode\"\n[model]\npreset = \"tiny\"\n[axes]\nbatch = [0]\n", 5, 10,
                 "batch in [axes] must be positive, got 0");
  expect_refused(kBase + "k = [0]\n", 7, 6, "k in [axes] must be positive");
  expect_refused(kBase + "k = [1.5]\n", 7, 6, "a fraction of d_ffn must be in (0, 1]");
  expect_refused(kBase + "ffn = [\"moc_9:8\"]\n", 7, 8, "a > b", "moc_8:9");
  expect_refused(kBase + "ffn = [\"moc_0:8\"]\n", 7, 8, "must be positive");
  expect_refused(kBase + "ffn = [\"sparse\"]\n", 7, 8, "unknown ffn 'sparse'", "moc_a:b");
  expect_refused(kBase + "preset = [\"2b\"]\n", 7, 11, "unknown preset '2b' in [axes]", "350m");
  expect_refused(kBase + "mode = [\"ffn_decode\"]\n", 7, 9,
                 "unknown mode 'ffn_decode' in [axes]; did you mean 'ffn-decode'?",
                 "train, decode, eval, ffn-train, ffn-decode, topk");
  expect_refused("device = \"gpu\"\n" + kBase, 1, 10, "unknown device 'gpu' at the top level; did you mean 'cuda'?",
                 "auto, cpu, cuda");
  expect_refused(kBase + "topk_position = [\"relu\"]\n", 7, 18, "unknown selection rule 'relu'", "abs_silu");
  expect_refused(kBase + "topk_backend = [\"cub\"]\n", 7, 17, "unknown top-k backend 'cub'", "own, raft");
  expect_refused(kBase + "decode_impl = [\"megakernel\"]\n", 7, 16, "unknown decode implementation 'megakernel'",
                 "decode implementations: kernels");
  expect_refused(kBase + "precision = [\"fp16\"]\n", 7, 14, "unknown precision 'fp16'", "bf16-fp32master");
  expect_refused(kBase + "[measure]\nwarmup = -1\n", 8, 10, "warmup in [measure] must be >= 0, got -1");
  expect_refused(kBase + "[measure]\ntarget_noise = 0.0\n", 8, 16,
                 "target_noise in [measure] must be a positive number");
  expect_refused(kBase + "[measure]\nmin_reps = 10\nmax_reps = 5\n", 9, 12, "min_reps (10) exceeds max_reps (5)",
                 "raise max_reps");
  expect_refused(kBase + "batch_dup = 1\n", 7, 1, "unknown key 'batch_dup'");
  expect_refused(kBase + "seq = [8, 8]\n", 7, 11, "lists 8 twice");
  expect_refused(kBase + "seq = []\n", 7, 7, "has no values");
  // list and show print the name and description: a terminal sequence in them is refused where it is written.
  expect_refused("name = \"t\\u001b[2J\"\nmode = \"topk\"\n[model]\npreset = \"tiny\"\n", 1, 8,
                 "name contains a control character (code 27)", "plain text");
  expect_refused("name = \"t\"\ndescription = \"a\\tb\"\nmode = \"topk\"\n[model]\npreset = \"tiny\"\n", 2, 15,
                 "description contains a control character (code 9)");
}

// An axis of 10^6 values whose last one repeats the 17th is refused at that value. The check is linear: the
// pairwise one it replaced took ~45 minutes at this size (issue #27), past CTest's timeout for this test.
TEST(ScenarioErrors, AHugeAxisIsCheckedForDuplicatesInLinearTime) {
  std::string axis = "seq = [";
  for (int i = 1; i <= 1000000; ++i) axis += std::to_string(i) + ", ";
  axis += "17]\n";
  const auto e = refusal(kBase + axis);
  ASSERT_TRUE(e.has_value()) << "accepted";
  EXPECT_EQ(e->line, 7);
  EXPECT_NE(e->message.find("lists 17 twice"), std::string::npos) << e->message;
}

TEST(ScenarioErrors, AModelThatCannotBeBuiltIsRefusedAtTheOffendingValueWithConfigErrorsHint) {
  // tiny has d_ffn 85: K = 1024 cannot be kept. The k entry is blamed, with ModelConfig's advice.
  expect_refused(kBase + "ffn = [\"moc\"]\nk = [17, 1024]\n", 8, 10, "k (1024) must not exceed d_ffn (85)",
                 "lower k or raise d_ffn");
  // The same from [model].
  expect_refused("mode = \"decode\"\n[model]\npreset = \"tiny\"\nffn = \"moc\"\nk = 1024\n", 5, 5,
                 "k (1024) must not exceed d_ffn (85)", "lower k or raise d_ffn");
  // A value only the resolved model can judge: heads must divide hidden.
  expect_refused("mode = \"train\"\n[model]\npreset = \"tiny\"\n[axes]\nheads = [4, 3]\n", 5, 13,
                 "heads (3) must divide hidden (32)", "divisors of hidden");
  // The message says which point and backend.
  const auto e = refusal(kBase + "ffn = [\"moc\"]\nk = [1024]\n");
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("backend cpu, point #0: batch=1 ffn=moc k=1024"), std::string::npos) << e->what();
}

TEST(ScenarioErrors, AModelThatOnlyOneBackendsOverridesBreakIsRefusedUpFront) {
  // Fine on cuda (1b keeps K = 1024), impossible on cpu once the override switches to tiny.
  const std::string text =
      "mode = \"decode\"\n"
      "[model]\n"
      "preset = \"1b\"\n"
      "ffn = \"moc\"\n"
      "k = 1024\n"
      "[overrides.cpu]\n"
      "model = { preset = \"tiny\" }\n";
  expect_refused(text, 5, 5, "k (1024) must not exceed d_ffn (85) (backend cpu", "lower k");
  // The override that fixes it.
  const std::string fixed = text.substr(0, text.find("model = {")) + "model = { preset = \"tiny\", k = 0.2 }\n";
  EXPECT_FALSE(refusal(fixed).has_value()) << refusal(fixed)->what();
  // min_reps > max_reps that only the cpu override creates points at the override.
  expect_refused(kBase + "[measure]\nmin_reps = 10\n[overrides.cpu]\nmeasure = { max_reps = 4 }\n", 10, 24,
                 "min_reps (10) exceeds max_reps (4) for backend cpu");
}

TEST(ScenarioErrors, ExcludesAndOverridesMayOnlyNameDeclaredAxes) {
  expect_refused(kBase + "[[exclude]]\nffn = \"dense\"\n", 8, 1, "'ffn' is not an axis declared in [axes]", "batch");
  expect_refused(kBase + "[overrides.cpu]\naxes = { seq = [8] }\n", 8, 10,
                 "axis 'seq' in [overrides.cpu].axes is not declared", "declare seq in [axes]");
}

TEST(ScenarioErrors, MissingModeOrPresetSaysWhereToSetIt) {
  const auto no_mode = refusal("[model]\npreset = \"tiny\"\n");
  ASSERT_TRUE(no_mode);
  EXPECT_NE(no_mode->message.find("no mode"), std::string::npos);
  EXPECT_NE(no_mode->hint.find("[axes] mode"), std::string::npos);
  const auto no_preset = refusal("mode = \"train\"\n");
  ASSERT_TRUE(no_preset);
  EXPECT_NE(no_preset->message.find("no model preset"), std::string::npos);
  EXPECT_NE(no_preset->hint.find("preset = \"1b\""), std::string::npos);
}

TEST(ScenarioErrors, AnUnreadableFileIsNamed) {
  try {
    load_scenario("/nonexistent/study.toml");
    FAIL();
  } catch (const ScenarioError& e) {
    EXPECT_EQ(e.file, "/nonexistent/study.toml");
    EXPECT_NE(std::string(e.what()).find("cannot read"), std::string::npos);
  }
}

// A file that never ends (a device) is refused once it passes the size cap, not read until memory runs out.
TEST(ScenarioErrors, AnEndlessFileIsRefusedAtTheSizeCap) {
  try {
    load_scenario("/dev/zero");
    FAIL() << "accepted";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(e.file, "/dev/zero");
    EXPECT_NE(std::string(e.what()).find("larger than 64 MiB"), std::string::npos) << e.what();
  }
}

TEST(ScenarioExpand, TheCartesianProductFollowsFileOrderFirstAxisSlowest) {
  const Scenario s = parse_scenario(
      "mode = \"ffn-train\"\n[model]\npreset = \"tiny\"\n[axes]\n"
      "ffn = [\"dense\", \"moc\", \"moc_2:8\"]\nbatch = [1, 2]\ngcp = [false, true]\n",
      kFile);
  EXPECT_EQ(s.axis_names(), (std::vector<std::string>{"ffn", "batch", "gcp"})) << "file order, not toml++'s key order";
  const auto pts = s.expand("cuda");
  ASSERT_EQ(pts.size(), 12u);
  for (std::size_t i = 0; i < pts.size(); ++i) EXPECT_EQ(pts[i].index, static_cast<int>(i));
  EXPECT_EQ(axis_values(pts, "ffn")[0], "dense");
  EXPECT_EQ(axis_values(pts, "ffn")[3], "dense");
  EXPECT_EQ(axis_values(pts, "ffn")[4], "moc");
  EXPECT_EQ(axis_values(pts, "gcp"), (std::vector<std::string>{"false", "true", "false", "true", "false", "true",
                                                               "false", "true", "false", "true", "false", "true"}));
  EXPECT_EQ(pts[5].axes,
            (std::vector<std::pair<std::string, std::string>>{{"ffn", "moc"}, {"batch", "1"}, {"gcp", "true"}}));
  // The model follows the point's values.
  EXPECT_EQ(pts[0].model.ffn_name(), "dense");
  EXPECT_EQ(pts[5].model.ffn_name(), "moc+gcp");
  EXPECT_EQ(pts[11].model.ffn_name(), "moc_2:8+gcp");
  EXPECT_EQ(pts[5].batch, 1);
  EXPECT_EQ(pts[7].batch, 2);
  EXPECT_EQ(pts[0].mode, "ffn-train");
  EXPECT_EQ(pts[0].seq, 16) << "seq defaults to the preset's seq_len";
  EXPECT_EQ(pts[0].precision, "bf16") << "the cuda default";
  EXPECT_EQ(s.expand("cpu")[0].precision, "fp32") << "the CPU backend computes in fp32";
  EXPECT_EQ(pts[0].topk_backend, "own");
  EXPECT_EQ(pts[0].decode_impl, kDefaultDecodeImpl);
}

TEST(ScenarioExpand, DecodeImplIsAnAxisShownInDecodeLabels) {
  const auto pts = parse_scenario("[model]\npreset = \"tiny\"\n[axes]\nmode = [\"decode\", \"train\"]\n"
                                  "decode_impl = [\"kernels\"]\n",
                                  kFile)
                       .expand("cpu");
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_EQ(pts[0].decode_impl, "kernels");
  EXPECT_NE(pts[0].describe().find("| kernels"), std::string::npos) << pts[0].describe();
  EXPECT_EQ(pts[1].describe().find("| kernels"), std::string::npos)
      << "train points do not decode: " << pts[1].describe();
}

// decode_impl = "persistent" (the whole step as one cooperative kernel) was retired: a file that still asks
// for it -- an axis value, a scalar axis, an override's axes, a filter -- is refused before any work, at the
// value, saying why and what to write instead.
TEST(ScenarioValidation, RetiredPersistentDecodeImplIsRefusedWithTheReasonAndAFix) {
  const std::string why =
      "was retired (slower than \"kernels\" at every measured point, bench/RESULTS.md)";
  const std::string fix = "use \"kernels\" or remove the key";
  expect_refused(kBase + "decode_impl = [\"kernels\", \"persistent\"]\n", 7, 27,
                 "decode_impl \"persistent\" in [axes] " + why, fix);
  expect_refused(kBase + "decode_impl = \"persistent\"\n", 7, 15, "decode_impl \"persistent\" in [axes] " + why, fix);
  expect_refused(kBase + "decode_impl = [\"kernels\"]\n[overrides.cuda]\naxes = { decode_impl = [\"persistent\"] }\n",
                 9, 25, "decode_impl \"persistent\"", fix);
  expect_refused(kBase + "decode_impl = [\"kernels\"]\n[[exclude]]\ndecode_impl = \"persistent\"\n", 9, 15,
                 "decode_impl \"persistent\"", fix);
  // The whole message, as the command line prints it.
  const auto e = refusal(kBase + "decode_impl = [\"persistent\"]\n");
  ASSERT_TRUE(e.has_value());
  EXPECT_STREQ(e->what(),
               "study.toml:7:16: decode_impl \"persistent\" in [axes] was retired (slower than \"kernels\" at every "
               "measured point, bench/RESULTS.md)\n  hint: use \"kernels\" or remove the key");
  // "kernels" and no key at all still parse.
  EXPECT_FALSE(refusal(kBase + "decode_impl = [\"kernels\"]\n").has_value());
  EXPECT_FALSE(refusal(kBase).has_value());
}

// [measure] steps was parsed, documented and set by nine scenarios and never changed what ran: removed, and a
// file that still sets it is refused with the reason and the key that does what it may have meant.
TEST(ScenarioValidation, RemovedMeasureStepsIsRefusedWithTheReasonAndAFix) {
  const std::string train = "mode = \"train\"\n[model]\npreset = \"tiny\"\n";
  expect_refused(train + "[measure]\nwarmup = 1\nsteps = 3\n", 6, 1,
                 "[measure] steps was removed: it never changed what ran",
                 "remove the line; to train on real text for N steps, use [data] steps = N");
  // The same inside an override's measure table.
  expect_refused(train + "[overrides.cpu]\nmeasure = { steps = 2 }\n", 5, 0, "[measure] steps was removed",
                 "[data] steps = N");
  // [data] steps (the length of a training run on real text) and [profile] steps still parse.
  EXPECT_FALSE(refusal(train + "[profile]\nsteps = 2\n").has_value());
  // No shipped scenario sets it any more (scenarios/ also holds data files that are no scenario at all:
  // paper_numbers.toml, refused for other reasons).
  int scenarios = 0;
  for (const auto& f : std::filesystem::recursive_directory_iterator(scenarios_dir())) {
    if (f.path().extension() != ".toml") continue;
    try {
      load_scenario(f.path().string());
      ++scenarios;
    } catch (const ScenarioError& e) {
      EXPECT_EQ(std::string(e.what()).find("steps was removed"), std::string::npos) << e.what();
    }
  }
  EXPECT_GE(scenarios, 9);
}

TEST(ScenarioExpand, AScalarAxisIsAOneValueAxis) {
  const auto pts = parse_scenario(kBase + "seq = 64\n", kFile).expand("cpu");
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_EQ(pts[1].seq, 64);
  EXPECT_EQ(*pts[1].axis("seq"), "64");
}

TEST(ScenarioExpand, WithoutAxesAScenarioIsOnePoint) {
  const auto pts = parse_scenario("mode = \"topk\"\n[model]\npreset = \"tiny\"\nffn = \"moc\"\n", kFile).expand("cpu");
  ASSERT_EQ(pts.size(), 1u);
  EXPECT_TRUE(pts[0].axes.empty());
  EXPECT_EQ(pts[0].model.kept_channels(), 17);
}

TEST(ScenarioExpand, ExcludesDropPointsMatchingEveryGivenKey) {
  const std::string axes =
      "mode = \"ffn-train\"\n[model]\npreset = \"tiny\"\n[axes]\n"
      "ffn = [\"dense\", \"moc\", \"moc_2:8\"]\nk = [8, 17]\nbatch = [1, 2]\n";
  // k means nothing for dense: keep one dense point per batch.
  const auto pts = parse_scenario(axes + "[[exclude]]\nffn = \"dense\"\nk = 8\n", kFile).expand("cpu");
  EXPECT_EQ(pts.size(), 10u);
  for (const auto& p : pts) EXPECT_FALSE(*p.axis("ffn") == "dense" && *p.axis("k") == "8") << p.describe();
  // A list matches any of its values; entries are alternatives.
  const auto fewer = parse_scenario(axes +
                                        "[[exclude]]\nffn = [\"dense\", \"moc_2:8\"]\nk = 8\n"
                                        "[[exclude]]\nbatch = 2\nffn = \"moc\"\n",
                                    kFile)
                         .expand("cpu");
  EXPECT_EQ(fewer.size(), 12u - 4u - 2u);
  for (std::size_t i = 0; i < fewer.size(); ++i) EXPECT_EQ(fewer[i].index, static_cast<int>(i)) << "reindexed";
}

TEST(ScenarioExpand, IncludesAddPointsMergedOverTheFirstAxisValuesWithoutDuplicates) {
  const std::string base =
      "mode = \"ffn-decode\"\n[model]\npreset = \"tiny\"\n[axes]\n"
      "mode = [\"ffn-decode\", \"decode\"]\nbatch = [1, 2]\nffn = [\"dense\", \"moc\"]\n";
  const auto pts = parse_scenario(base +
                                      "[[include]]\nmode = \"decode\"\nbatch = 8\n"
                                      "[[include]]\nbatch = 1\nffn = \"moc\"\nmode = \"decode\"\n"  // already there
                                      "[[include]]\nffn = \"moc\"\ntopk_position = \"silu\"\n",     // undeclared axis
                                  kFile)
                       .expand("cuda");
  ASSERT_EQ(pts.size(), 8u + 2u);
  const auto& extra = pts[8];
  EXPECT_EQ(extra.mode, "decode");
  EXPECT_EQ(extra.batch, 8);
  EXPECT_EQ(*extra.axis("ffn"), "dense") << "unspecified axes take their first value";
  EXPECT_EQ(extra.axes.size(), 3u);
  const auto& ablation = pts[9];
  EXPECT_EQ(ablation.mode, "ffn-decode");
  EXPECT_EQ(ablation.model.ffn.rule, SelectRule::silu);
  ASSERT_EQ(ablation.axes.size(), 4u);
  EXPECT_EQ(ablation.axes.back(), (std::pair<std::string, std::string>{"topk_position", "silu"}));
  // An include brings back what an exclude dropped: it is explicit.
  const auto back =
      parse_scenario(base + "[[exclude]]\nmode = \"decode\"\n[[include]]\nmode = \"decode\"\nbatch = 2\n", kFile)
          .expand("cpu");
  ASSERT_EQ(back.size(), 5u);
  EXPECT_EQ(back[4].mode, "decode");
  EXPECT_EQ(back[4].batch, 2);
}

TEST(ScenarioExpand, BackendOverridesChangeThePointsAndAreReported) {
  const std::string text =
      "mode = \"decode\"\n[model]\npreset = \"1b\"\nlayers = 4\n[measure]\ngenerate = 128\nmax_reps = 200\n"
      "[axes]\nbatch = [1, 2, 3, 4]\n"
      "[overrides.cpu]\n"
      "model = { preset = \"tiny\", layers = 2 }\n"
      "measure = { generate = 8, max_reps = 5 }\n"
      "axes = { batch = [1, 2] }\n";
  const Scenario s = parse_scenario(text, kFile);
  std::vector<AppliedOverride> applied;
  const auto cuda = s.expand("cuda", &applied);
  EXPECT_TRUE(applied.empty());
  ASSERT_EQ(cuda.size(), 4u);
  EXPECT_EQ(cuda[0].model.preset, "1b");
  EXPECT_EQ(cuda[0].model.layers, 4);
  EXPECT_EQ(cuda[0].measure.generate, 128);

  const auto cpu = s.expand("cpu", &applied);
  ASSERT_EQ(cpu.size(), 2u);
  EXPECT_EQ(cpu[1].batch, 2);
  EXPECT_EQ(cpu[0].model.preset, "tiny");
  EXPECT_EQ(cpu[0].model.layers, 2);
  EXPECT_EQ(cpu[0].measure.generate, 8);
  EXPECT_EQ(cpu[0].measure.max_reps, 5);
  EXPECT_EQ(cpu[0].measure.min_reps, 5) << "untouched settings keep their defaults";
  EXPECT_EQ(cpu[0].model.seq_len, 128 + 8) << "seq_len covers prompt + generate";
  ASSERT_EQ(applied.size(), 5u);
  auto has = [&](const std::string& sec, const std::string& key, const std::string& value) {
    for (const auto& a : applied)
      if (a.section == sec && a.key == key && a.value == value) return true;
    return false;
  };
  EXPECT_TRUE(has("model", "preset", "tiny"));
  EXPECT_TRUE(has("model", "layers", "2"));
  EXPECT_TRUE(has("measure", "generate", "8"));
  EXPECT_TRUE(has("measure", "max_reps", "5"));
  EXPECT_TRUE(has("axes", "batch", "[1, 2]"));
  EXPECT_THROW(s.expand("tpu"), ScenarioError);
}

TEST(ScenarioExpand, KAsAFractionResolvesAgainstTheFinalDffn) {
  const auto pts = parse_scenario(
                       "mode = \"ffn-train\"\n[model]\nffn = \"moc\"\nk = 0.2\n[axes]\n"
                       "preset = [\"tiny\", \"1b\"]\nd_ffn = [100, 5461]\n",
                       kFile)
                       .expand("cuda");
  ASSERT_EQ(pts.size(), 4u);
  EXPECT_EQ(pts[0].model.ffn.k, 20) << "tiny with d_ffn 100";
  EXPECT_EQ(pts[1].model.ffn.k, 1092) << "0.2 * 5461";
  EXPECT_EQ(pts[3].model.ffn.k, 1092);
  const auto whole = parse_scenario(kBase + "ffn = [\"moc\"]\nk = [1.0, 17]\n", kFile).expand("cpu");
  EXPECT_EQ(whole[0].model.ffn.k, 85) << "1.0 is a fraction (all channels), not K = 1";
  EXPECT_EQ(*whole[0].axis("k"), "1.0");
  EXPECT_EQ(whole[1].model.ffn.k, 17);
}

TEST(ScenarioExpand, A2of8PointOnThe1bPresetKeeps1366Channels) {
  const auto pts =
      parse_scenario("mode = \"ffn-decode\"\n[model]\npreset = \"1b\"\n[axes]\nffn = [\"moc_2:8\"]\n", kFile)
          .expand("cuda");
  ASSERT_EQ(pts.size(), 1u);
  EXPECT_EQ(pts[0].model.d_ffn, 5461);
  EXPECT_EQ(pts[0].model.kept_channels(), 1366);
}

TEST(ScenarioExpand, DescribeIsOneLineWithIndexModeAxesAndModel) {
  const auto pts = parse_scenario(kBase + "ffn = [\"moc_2:8\"]\n", kFile).expand("cpu");
  const std::string d = pts[1].describe();
  EXPECT_EQ(d.find('\n'), std::string::npos);
  EXPECT_EQ(d.rfind("#1 ffn-decode batch=2 ffn=moc_2:8 | tiny", 0), 0u) << d;
  EXPECT_NE(d.find("kept"), std::string::npos) << d;
}

TEST(ScenarioShipped, EveryShippedScenarioParsesAndExpandsForBothBackends) {
  // Paths in a scenario are taken from the current directory: the repository root, as the README runs them.
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(scenarios_dir().parent_path());
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(scenarios_dir())) {
    if (entry.path().extension() != ".toml") continue;
    ++files;
    SCOPED_TRACE(entry.path().string());
    // real_model.toml needs what scripts/setup_real_model.sh fetches and writes (~93 MB, not part of setup.sh):
    // without it the scenario is refused, naming the file and the script.
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.find(".local/smollm2/") != std::string::npos &&
        (!std::filesystem::exists(".local/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") ||
         !std::filesystem::exists(".local/smollm2/heldout_ids.txt"))) {
      try {
        for (const auto& backend : scenario_backends()) (void)load_scenario(entry.path().string()).expand(backend);
        ADD_FAILURE() << "expanded without its model";
      } catch (const ScenarioError& e) {
        EXPECT_NE(std::string(e.what()).find("scripts/setup_real_model.sh"), std::string::npos) << e.what();
      }
      continue;
    }
    Scenario s;
    ASSERT_NO_THROW(s = load_scenario(entry.path().string()));
    EXPECT_FALSE(s.description.empty());
    for (const auto& backend : scenario_backends()) {
      const auto pts = s.expand(backend);
      EXPECT_FALSE(pts.empty()) << backend;
      for (const auto& p : pts) EXPECT_NO_THROW(p.model.validate()) << p.describe();
    }
  }
  std::filesystem::current_path(cwd);
  EXPECT_GE(files, 2);
}

TEST(ScenarioShipped, DecodeBs1To4Is2ModesBy3FfnsBy4BatchesOnTheGpu) {
  const Scenario s = load_scenario((scenarios_dir() / "decode_bs1_4.toml").string());
  EXPECT_EQ(s.name, "decode_bs1_4");
  const auto cuda = s.expand("cuda");
  ASSERT_EQ(cuda.size(), 2u * 3u * 4u);
  EXPECT_EQ(cuda[0].model.preset, "1b");
  EXPECT_EQ(cuda[0].model.layers, 24);
  EXPECT_EQ(cuda[0].measure.prompt, 128);
  EXPECT_EQ(cuda[0].measure.generate, 128);
  std::set<std::string> modes, ffns, batches, impls;
  for (const auto& p : cuda) {
    modes.insert(p.mode);
    impls.insert(p.decode_impl);
    ffns.insert(p.model.ffn_name());
    batches.insert(std::to_string(p.batch));
    const std::size_t kept = static_cast<std::size_t>(p.model.kept_channels());
    EXPECT_EQ(kept, p.model.ffn_name() == "moc" ? 1024u : p.model.ffn_name() == "moc_2:8" ? 1366u : 5461u);
  }
  EXPECT_EQ(modes, (std::set<std::string>{"ffn-decode", "decode"}));
  EXPECT_EQ(ffns, (std::set<std::string>{"dense", "moc", "moc_2:8"}));
  EXPECT_EQ(batches, (std::set<std::string>{"1", "2", "3", "4"}));
  EXPECT_EQ(impls, (std::set<std::string>{"kernels"}));
  // The CPU keeps the study's shape, every point, and the 1b layer, with a small enough model and run.
  std::vector<AppliedOverride> applied;
  const auto cpu = s.expand("cpu", &applied);
  ASSERT_EQ(cpu.size(), cuda.size());
  EXPECT_FALSE(applied.empty());
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_EQ(cpu[i].axes, cuda[i].axes);
    EXPECT_EQ(cpu[i].decode_impl, "kernels");
    EXPECT_EQ(cpu[i].model.d_ffn, 5461);
    EXPECT_EQ(cpu[i].model.kept_channels(), cuda[i].model.kept_channels());
    EXPECT_LE(cpu[i].model.layers, 1);
    EXPECT_LE(cpu[i].measure.generate, 16);
  }
}

TEST(ScenarioShipped, SmokeCpuCoversEveryModeOnTheTinyPreset) {
  const Scenario s = load_scenario((scenarios_dir() / "smoke_cpu.toml").string());
  EXPECT_EQ(s.device, "cpu");
  const auto pts = s.expand("cpu");
  std::set<std::string> modes;
  for (const auto& p : pts) {
    modes.insert(p.mode);
    EXPECT_EQ(p.model.preset, "tiny");
  }
  EXPECT_EQ(modes.size(), scenario_modes().size());
  EXPECT_LE(pts.size(), 12u);
}

TEST(ScenarioLoad, LoadReadsTheFileAndReportsItsPath) {
  const auto path = std::filesystem::temp_directory_path() / "mocbench_test_scenario.toml";
  { std::ofstream(path) << kBase << "[measure]\nmin_reps = 0\n"; }
  try {
    load_scenario(path.string());
    FAIL() << "min_reps = 0 accepted";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(e.file, path.string());
    EXPECT_EQ(e.line, 8);
    EXPECT_EQ(std::string(e.what()).rfind(path.string() + ":8:12: ", 0), 0u) << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace moc

namespace moc {
namespace {

// [data]: real text for train points (and decode prompts); placeholders in save / weights.
const std::string kText =
    "name = \"t\"\n"                 // 1
    "mode = \"train\"\n"             // 2
    "[model]\n"                      // 3
    "preset = \"tiny\"\n"            // 4
    "vocab = 512\n"                  // 5
    "[data]\n"                       // 6
    "corpus = \"/tmp\"\n"            // 7 (any directory is a corpus)
    "steps = 20\n"                   // 8
    "[axes]\n"                       // 9
    "ffn = [\"dense\", \"moc\"]\n";  // 10

TEST(ScenarioData, DataSettingsReachEveryPointWithPlaceholdersFilled) {
  const auto s = parse_scenario(kText + "gcp = [false, true]\n" +
                                    "[overrides.cpu]\ndata = { steps = 5, save = \"ck/{preset}-{ffn}-{gcp}-{batch}.st\" }\n",
                                kFile);
  const auto cpu = s.expand("cpu");
  ASSERT_EQ(cpu.size(), 4u);
  EXPECT_EQ(cpu[0].data.corpus, "/tmp");
  EXPECT_EQ(cpu[0].data.steps, 5);
  EXPECT_EQ(cpu[0].data.save, "ck/tiny-dense-false-1.st");
  EXPECT_EQ(cpu[3].data.save, "ck/tiny-moc-true-1.st");
  const auto cuda = s.expand("cuda");
  EXPECT_EQ(cuda[0].data.steps, 20);
  EXPECT_TRUE(cuda[0].data.save.empty());
  // No [data]: random tokens, as before.
  EXPECT_FALSE(parse_scenario(kBase, kFile).expand("cpu")[0].data.active());
}

TEST(ScenarioData, BadDataSettingsAreRefusedWithTheirLine) {
  expect_refused(kText + "[data]\n", 11, 0, "TOML syntax error");
  {
    std::string t = kText;
    t.replace(t.find("steps = 20"), 10, "stepz = 20");
    expect_refused(t, 8, 1, "unknown key 'stepz' in [data]; did you mean 'steps'?");
  }
  {
    std::string t = kText;
    t.replace(t.find("corpus = \"/tmp\""), 15, "corpus = \"/no/such/dir\"");
    expect_refused(t, 7, 0, "neither a known corpus", "setup.sh");
  }
  {
    std::string t = kText;
    t.replace(t.find("corpus = \"/tmp\"\n"), 16, "");
    expect_refused(t, 6, 0, "[data] has no corpus", "python3.11-doc");
  }
  expect_refused(kText + "[overrides.cpu]\ndata = { val_fraction = 1.5 }\n", 12, 0, "val_fraction must be below 1");
  expect_refused(kText + "[overrides.cpu]\ndata = { lr = -1 }\n", 12, 0, "must be a positive number");
  {
    std::string t = kText;
    t.replace(t.find("vocab = 512"), 11, "vocab = 64");
    expect_refused(t, 5, 0, "at least 320", "vocab = 512");
  }
  {
    std::string t = kText;
    t.replace(t.find("mode = \"train\""), 14, "mode = \"ffn-train\"");
    expect_refused(t, 6, 0, "[data] applies to train, decode and eval points");
  }
  expect_refused(kText + "[overrides.cpu]\ndata = { save = \"x/{nope}.st\" }\n", 12, 0, "unknown placeholder {nope}");
  expect_refused(kText + "[overrides.cpu]\ndata = { resume = true }\n", 6, 0, "resume = true needs [model] weights");
}

TEST(ScenarioData, AWeightsAxisMixesRandomAndTemplatedCheckpoints) {
  std::string t = kText;
  t.replace(t.find("mode = \"train\""), 14, "mode = \"decode\"");
  t.replace(t.find("steps = 20\n"), 11, "");
  const auto s = parse_scenario(t + "weights = [\"random\", \"/no/ckpt/{ffn}.st\"]\n", kFile);
  const auto pts = s.expand("cpu");
  ASSERT_EQ(pts.size(), 4u);
  EXPECT_EQ(pts[0].weights, "");
  EXPECT_EQ(pts[1].weights, "/no/ckpt/dense.st");
  EXPECT_TRUE(pts[1].weights_deferred);  // checked when a run starts: another scenario writes it
  EXPECT_EQ(pts[3].weights, "/no/ckpt/moc.st");
  // Without placeholders a missing checkpoint is refused while reading, as before.
  expect_refused(t + "weights = [\"random\", \"/no/ckpt.st\"]\n", 10, 0, "no file '/no/ckpt.st'");
}

}  // namespace
}  // namespace moc

namespace moc {
namespace {

TEST(ScenarioGpus, GpusZero1AndOverlapAreTrainAxes) {
  const std::string train =
      "name = \"t\"\nmode = \"train\"\n[model]\npreset = \"tiny\"\n[axes]\ngpus = [1, 2]\n"  // gpus on line 6
      "zero1 = [false, true]\n[[exclude]]\ngpus = 1\nzero1 = true\n";
  const auto s = parse_scenario(train, kFile);
  const auto cuda = s.expand("cuda");
  ASSERT_EQ(cuda.size(), 3u);
  EXPECT_EQ(cuda[0].gpus, 1);
  EXPECT_FALSE(cuda[0].zero1);
  EXPECT_EQ(cuda[1].gpus, 2);
  EXPECT_FALSE(cuda[1].zero1);
  EXPECT_TRUE(cuda[2].zero1);
  EXPECT_TRUE(cuda[2].comm_overlap);
  // The CPU backend runs its ranks as processes too (shared memory instead of NCCL: the launcher's test bed).
  EXPECT_EQ(s.expand("cpu").size(), 3u);
  EXPECT_EQ(parse_scenario(kBase, kFile).expand("cpu")[0].gpus, 1);
  const std::string head = "name = \"t\"\nmode = \"train\"\n[model]\npreset = \"tiny\"\n[axes]\n";
  expect_refused(kBase + "gpus = [2]\n", 7, 0, "data parallelism is for train points, not ffn-decode");
  expect_refused(kBase + "gpus = [0]\n", 7, 0, "must be positive");
  // zero1 and comm_overlap = false mean nothing on one GPU: refused, with the exclude that fixes it.
  expect_refused(head + "gpus = [1, 2]\nzero1 = [true]\n", 7, 0, "applies to data-parallel points (gpus > 1)",
                 "[[exclude]] gpus = 1, zero1 = true");
  expect_refused(head + "comm_overlap = [false]\n", 6, 0, "applies to data-parallel points (gpus > 1)");
  expect_refused(head + "zero1 = [\"yes\"]\n", 6, 0, "zero1");
}

}  // namespace
}  // namespace moc
