// fit.h — calibrates chosen efficiency constants of a software-stack preset against an experiment's
// published values (references/README.md: "calibrate the presets against what is here"), with a
// hold-out: fit on some published values, report the error on the others.
// Requires: a loaded Spec whose points all run on the stack being fitted, and `value` comparisons
// of `metric` in its `published` section. Note: the constants move together for every point — a
// global fit, never a per-row knob; each fitted constant's source names the experiment, the
// values it was fitted on and the residual; the stack's fit record for (experiment, metric) is
// written or replaced, so results mark those comparisons as calibration; everything else is kept.
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
  json stack;                  // the fitted stack (efficiency values and sources, fit record)
  std::vector<FitRow> rows;    // every published value of the metric, after the fit
  double train_rms_log = 0;    // rms of log(reproduced / published) over the trained rows
  double holdout_rms_log = 0;  // over the held-out rows (0 when none)
};

// Fits `keys` (efficiency constants, each within its table bounds) of `stack` (an
// experiments/stacks/ object) to minimize the mean squared log ratio reproduced / published over
// the spec's `value` comparisons of `metric` whose label is in `train` (all of them when `train` is
// empty). Errors: an unknown key, a point on another stack, no comparison to fit, a point that is
// not ok under the starting constants.
Expected<FitReport> fit_stack_to_experiment(const Spec& spec, const json& stack, const std::vector<std::string>& keys,
                                            const std::string& metric, const std::set<std::string>& train);

}  // namespace cpbench
