// show.h — renders a results.json as aligned text tables: points with their metrics, then the
// published values beside the reproduced ones with relative errors and a pass/fail column, the
// in-sample ones (a stack constant was fitted on them) apart from the out-of-sample ones, each
// with its own mean |rel.err|.
// Requires: a schema_version 1 results document. Used by `cpbench show`.
// Note: reads the JSON document, so it shows any results file, including ones written by older builds
// (a comparison without "calibration" reads as out-of-sample).
#pragma once

#include <string>

#include "core/common/json_reader.h"

namespace cpbench {

// Fails (naming the file) when the document is not a schema_version 1 results file.
Expected<std::string> format_results(const json& results, const std::string& file);

}  // namespace cpbench
