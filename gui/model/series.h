// The Training view's data: the time series a run's points recorded (a training run on real text: train loss,
// learning rate and validation loss / perplexity by step) drawn one line per point, and a point's trained-gate
// histograms (pre- and post-SiLU per layer, with the top-K threshold; the overlap of two tokens' selections).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gui/model/store.h"

namespace moc::gui {

struct CurveLine {
  std::string label;  // the point's varying axes, "ffn=moc gcp=false"
  std::int64_t point_id = 0;
  std::vector<double> x, y;
};

struct CurvePlot {
  std::string name;
  std::vector<CurveLine> lines;
  bool log_y = false;  // suggested: positive values spanning a decade or more (perplexity)
};

// Names of step-indexed series (not histograms) some point of the run has, the main ones first.
std::vector<std::string> curve_names(Store& store, const RunRef& run);
// One line per point that has the series, labelled by the run's varying axes.
CurvePlot build_curves(Store& store, const RunRef& run, const std::string& name);

struct GateLayer {
  std::vector<double> pre_x, pre_y, post_x, post_y, overlap_x, overlap_y;
  double threshold_pre = 0, threshold_post = 0;  // NaN for a:b selections (no single threshold)
};

// The layers' gate histograms of one point (empty when the point has none).
std::vector<GateLayer> gate_layers(Store& store, const RunRef& run, std::int64_t point_id);

}  // namespace moc::gui
