// The one table model (db/table.h) and its four printers, on hand-made tables with known layouts; and that
// `show`, `stats` and `compare` print through it (the same cells in every format).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/report/profile_stats.h"
#include "app/report/report.h"
#include "db/table.h"

namespace moc {
namespace {

using report::Cell;
using report::Column;
using report::Table;

Column text_col(const std::string& key) {
  Column c;
  c.key = key;
  c.text = true;
  return c;
}
Column num_col(const std::string& key, const std::string& title, const std::string& unit, int decimals = -1) {
  Column c;
  c.key = key;
  c.title = title;
  c.unit = unit;
  c.decimals = decimals;
  return c;
}

Table sample() {
  Table t;
  t.id = "decode";
  t.title = "decode: a title";
  t.columns = {text_col("ffn"), num_col("latency_us", "latency (µs)", "us"), num_col("speedup", "vs dense", "x", 2)};
  t.rows = {{"dense", 30.0, {1.0, "1.00x"}}, {"moc|2:8", 20.04, {1.5, "1.50x"}}, {"moc", {}, {}}};
  t.notes = {"moc vs dense: 1.50x"};
  return t;
}

std::string grid(const Table& t, const report::TextStyle& style = {}) {
  std::ostringstream o;
  report::print_grid(t, o, style);
  return o.str();
}

TEST(ReportTable, GridAlignsTextLeftNumbersRightAndCountsCharactersNotBytes) {
  // "latency (µs)" is 12 characters (13 bytes): the dashes match the characters.
  EXPECT_EQ(grid(sample()),
            "ffn      latency (µs)  vs dense\n"
            "-------  ------------  --------\n"
            "dense            30.0     1.00x\n"
            "moc|2:8          20.0     1.50x\n"
            "moc                 -         -\n");
}

TEST(ReportTable, IndentColoursAndMachineOnlyColumns) {
  Table t = sample();
  Column hidden = text_col("status_a");
  hidden.machine_only = true;
  t.columns.push_back(hidden);
  for (auto& r : t.rows) r.push_back("ok");
  report::TextStyle style;
  style.indent = " ";
  style.colour = [](const Column& c, const Cell& x) -> const char* {
    return c.key == "speedup" && x.value && *x.value > 1 ? "\033[32m" : nullptr;
  };
  const std::string g = grid(t, style);
  EXPECT_EQ(g.find("status_a"), std::string::npos) << "machine-only columns are not drawn";
  EXPECT_NE(g.find(" moc|2:8          20.0     \033[32m1.50x\033[0m\n"), std::string::npos) << g;
  EXPECT_NE(g.find(" dense            30.0     1.00x\n"), std::string::npos) << g;
  std::ostringstream csv;
  report::print_csv({&t}, csv);
  EXPECT_NE(csv.str().find(",status_a\n"), std::string::npos) << "but carried by the CSV: " << csv.str();
}

TEST(ReportTable, NsColumnsScaleToOneUnitPerTableAndGroupThousands) {
  Table t;
  t.id = "x";
  Column ns = num_col("Total Time (ns)", "Total Time", "ns", 0);
  ns.scale_ns = ns.grouped = true;
  Column count = num_col("Instances", "", "", 0);
  count.grouped = true;
  t.columns = {ns, count};
  t.rows = {{2.5e7, 1234567.0}, {3.0e7, 2.0}};
  const report::Shown s = report::shown(t);
  EXPECT_EQ(s.headers, (std::vector<std::string>{"Total Time (ms)", "Instances"}));
  EXPECT_EQ(s.rows[0], (std::vector<std::string>{"25.000", "1,234,567"}));
  t.rows = {{999.0, 1.0}};
  EXPECT_EQ(report::shown(t).headers[0], "Total Time (ns)");
  EXPECT_EQ(report::shown(t).rows[0][0], "999");
}

TEST(ReportTable, NumbersWithThreeSignificantDigitsOrFixedDecimals) {
  EXPECT_EQ(report::format_number(1.7234, -1), "1.72");
  EXPECT_EQ(report::format_number(30.14, -1), "30.1");
  EXPECT_EQ(report::format_number(2175.4, -1), "2175");
  EXPECT_EQ(report::format_number(0.0042, -1), "0.0042");
  EXPECT_EQ(report::format_number(2175.4, 1, true), "2,175.4");
  EXPECT_EQ(report::exact_number(0.1), "0.1");
  EXPECT_EQ(report::exact_number(1200), "1200");
  EXPECT_EQ(report::exact_number(std::nan("")), "");
}

TEST(ReportTable, MarkdownHasTheGridsCellsAndEscapesPipes) {
  std::ostringstream o;
  report::print_markdown(sample(), o);
  EXPECT_EQ(o.str(),
            "\ndecode: a title\n\n"
            "| ffn | latency (µs) | vs dense |\n"
            "|---|---:|---:|\n"
            "| dense | 30.0 | 1.00x |\n"
            "| moc\\|2:8 | 20.0 | 1.50x |\n"
            "| moc | - | - |\n"
            "\n- moc vs dense: 1.50x\n");
}

TEST(ReportTable, CsvIsTheUnionOfColumnsWithPrefixesAndExactNumbers) {
  Table a = sample();
  Table b;
  b.id = "train";
  b.columns = {text_col("ffn"), num_col("step_ms", "step (ms)", "ms")};
  b.rows = {{"dense, big", 0.1 + 0.2}};
  std::ostringstream o;
  report::print_csv({&a, &b}, o, {"run", "mode"}, {{"7", "decode"}, {"7", "train"}});
  EXPECT_EQ(o.str(),
            "run,mode,ffn,latency_us,speedup,step_ms\n"
            "7,decode,dense,30,1,\n"
            "7,decode,moc|2:8,20.04,1.5,\n"
            "7,decode,moc,,,\n"
            "7,train,\"dense, big\",,,0.30000000000000004\n");
}

TEST(ReportTable, JsonCarriesValuesWithNullForMissingAndNonFinite) {
  Table t = sample();
  t.rows.push_back({"inf", std::numeric_limits<double>::infinity(), {}});
  const auto j = nlohmann::json::parse(report::to_json(t).dump());
  EXPECT_EQ(j["id"], "decode");
  EXPECT_EQ(j["columns"][0]["unit"], "text");
  EXPECT_EQ(j["columns"][1]["key"], "latency_us");
  EXPECT_EQ(j["columns"][1]["title"], "latency (µs)");
  EXPECT_EQ(j["columns"][1]["unit"], "us");
  EXPECT_DOUBLE_EQ(j["rows"][1]["latency_us"].get<double>(), 20.04);
  EXPECT_EQ(j["rows"][1]["ffn"], "moc|2:8");
  EXPECT_DOUBLE_EQ(j["rows"][1]["speedup"].get<double>(), 1.5) << "the value, not the shown text";
  EXPECT_TRUE(j["rows"][2]["latency_us"].is_null());
  EXPECT_TRUE(j["rows"][3]["latency_us"].is_null());
  EXPECT_EQ(j["notes"][0], "moc vs dense: 1.50x");
}

// `compare` in every format is one table: the same rows, the text shows a missing side's status.
TEST(ReportTable, CompareIsOneTableInEveryFormat) {
  Comparison c;
  c.label_a = "a.db:1 (H100)";
  c.label_b = "b.db:2 (H200)";
  c.warnings = {"devices differ"};
  c.matched = 2;
  c.only_a = 1;
  c.rows = {{"decode ffn=moc", "ms_per_token", 2.0, 1.5, "ok", "ok", metrics::Verdict::better},
            {"decode ffn=dense", "ms_per_token", 2.0, std::nullopt, "ok", "oom", metrics::Verdict::missing}};
  std::ostringstream text, md, csv, json;
  print_comparison(c, ComparisonFormat::table, text);
  print_comparison(c, ComparisonFormat::markdown, md);
  print_comparison(c, ComparisonFormat::csv, csv);
  print_comparison(c, ComparisonFormat::json, json);
  EXPECT_EQ(text.str(),
            "A: a.db:1 (H100)\nB: b.db:2 (H200)\nnote: devices differ\n"
            "point             metric        A    B     B/A  B is\n"
            "----------------  ------------  -  ---  ------  -------\n"
            "decode ffn=moc    ms_per_token  2  1.5  0.750x  better\n"
            "decode ffn=dense  ms_per_token  2  oom       -  missing\n"
            "2 points matched, 1 only in A\n");
  EXPECT_NE(md.str().find("| decode ffn=dense | ms_per_token | 2 | oom | - | missing |"), std::string::npos) << md.str();
  EXPECT_EQ(csv.str(),
            "point,metric,a,b,ratio_b_over_a,status_a,status_b,verdict,unit\n"
            "decode ffn=moc,ms_per_token,2,1.5,0.75,ok,ok,better,ms\n"
            "decode ffn=dense,ms_per_token,2,,,ok,oom,missing,ms\n");
  const auto j = nlohmann::json::parse(json.str());
  ASSERT_EQ(j.size(), 2u);
  EXPECT_DOUBLE_EQ(j[0]["ratio_b_over_a"].get<double>(), 0.75);
  EXPECT_TRUE(j[1]["b"].is_null());
  EXPECT_EQ(j[1]["status_b"], "oom");
  EXPECT_EQ(j[1]["unit"], "ms");
}

// A stats report is the same table: its CSV header is the column keys, its JSON the shared object.
TEST(ReportTable, StatsReportsAreSharedTables) {
  Table t;
  t.id = "cuda_gpu_kern_sum";
  t.title = "CUDA GPU Kernel Summary";
  t.columns = {stats::column("Total Time", stats::Unit::ns, false, 0), stats::column("Name", stats::Unit::none, true, 0)};
  t.rows = {{1200.0, "gemm"}};
  EXPECT_EQ(t.columns[0].key, "Total Time (ns)");
  std::ostringstream text, json;
  stats::print_text(t, text);
  EXPECT_EQ(text.str(),
            " ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):\n\n"
            " Total Time (ns)  Name\n"
            " ---------------  ----\n"
            "           1,200  gemm\n\n");
  stats::print_json(t, json);
  EXPECT_EQ(nlohmann::json::parse(json.str())["rows"][0]["Total Time (ns)"], 1200);
}

}  // namespace
}  // namespace moc
