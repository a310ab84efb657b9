// fit.h — calibrates chosen efficiency constants of a hardware preset against an experiment's
// published values (references/README.md: "calibrate the hardware presets against what is here"),
// with a hold-out: fit on some published values, report the error on the others.
// Requires: a loaded Spec whose points all use the preset being fitted, and `value` comparisons of
// `metric` in its `published` section. Note: the constants move together for every point — a
// global fit, never a per-row knob; each fitted constant's source names the experiment, the
// values it was fitted on and the residual, and everything else in the preset is kept.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "core/common/expected.h"
#include "core/experiment/spec.h"

namespace cpbench {

struct FitRow {
  std::string label;
  double published = 0, reproduced = 0;
  bool trained = false;  // in the training set (else held out)
};

struct FitReport {
  json preset;                 // the fitted preset (efficiency values and sources replaced)
  std::vector<FitRow> rows;    // every published value of the metric, after the fit
  double train_rms_log = 0;    // rms of log(reproduced / published) over the trained rows
  double holdout_rms_log = 0;  // over the held-out rows (0 when none)
};

// Fits `keys` (efficiency constants, each within its table bounds) to minimize the mean squared
// log ratio reproduced / published over the spec's `value` comparisons of `metric` whose label is
// in `train` (all of them when `train` is empty). Errors: an unknown key, a point on another
// preset, no comparison to fit, a point that is not ok under the starting constants.
Expected<FitReport> fit_preset_to_experiment(const Spec& spec, const json& preset, const std::vector<std::string>& keys,
                                             const std::string& metric, const std::set<std::string>& train);

}  // namespace cpbench
