// fit.h — calibrates chosen efficiency constants of a software-stack preset against an experiment's
// published values (references/README.md: "calibrate the presets against what is here"), with a
// hold-out: fit on some published values, report the error on the others.
// Requires: a loaded Spec whose points all run on the stack being fitted, and `value` comparisons
// of the fitted metrics in its `published` section. Note: the constants move together for every point — a
// global fit, never a per-row knob; each fitted constant's source names the experiment, the
// values it was fitted on and the residual; the stack's fit record for each (experiment, metric) is
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
  std::string metric;
  double published = 0, reproduced = 0;
  double before = 0;     // reproduced under the starting constants
  bool trained = false;  // in the training set (else held out)
};

struct FitReport {
  json stack;                  // the fitted stack (efficiency values and sources, fit record)
  std::vector<FitRow> rows;    // every published value of the metrics, after the fit
  double train_rms_log = 0;    // rms of log(reproduced / published) over the trained rows
  double holdout_rms_log = 0;  // over the held-out rows (0 when none)
};

// Fits `keys` (efficiency constants, each within its table bounds) of `stack` (an
// experiments/stacks/ object) to minimize the mean squared log ratio reproduced / published over
// the spec's `value` comparisons of `metrics` (one or several: a forward and a backward time)
// whose label is in `train` (all of them when `train` is empty). While searching, only the points
// those comparisons select are run; every row is reported before and after. Errors: an unknown
// key or metric, a point on another stack, no comparison to fit, a published value that has no
// reproduction under the starting constants.
Expected<FitReport> fit_stack_to_experiment(const Spec& spec, const json& stack, const std::vector<std::string>& keys,
                                            const std::vector<std::string>& metrics,
                                            const std::set<std::string>& train);

}  // namespace cpbench
