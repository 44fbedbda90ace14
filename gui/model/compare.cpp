#include "gui/model/compare.h"

namespace moc::gui {

CompareTable build_compare(const std::vector<db::PointRecord>& a, const std::vector<db::PointRecord>& b,
                           std::vector<std::string> names) {
  metrics::PointComparison c = metrics::compare_points(a, b, std::move(names));
  CompareTable t;
  t.metrics = std::move(c.metrics);
  t.only_a = c.only_a;
  t.only_b = c.only_b;
  for (auto& p : c.pairs)
    if (p.matched()) t.rows.push_back({std::move(p.mode), std::move(p.label), p.a->id, p.b->id, std::move(p.cells)});
  return t;
}

}  // namespace moc::gui
