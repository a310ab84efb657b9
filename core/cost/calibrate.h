// calibrate.h — fits a software-stack preset's efficiency constants to op times measured on a
// machine (`cpbench calibrate`).
// Requires: the machine (a hardware preset) and a stack JSON with a complete "efficiency" object
// (its values are the starting point and stay for every constant the measurements do not determine).
// Note: least squares on log time, Nelder–Mead per op family; each fitted constant's source
// becomes "fitted by cpbench calibrate from FILE (N measurements, rms log error x)".
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/common/expected.h"
#include "core/cost/cost_model.h"

namespace cpbench {

// One measured op. `op` and the keys of `shape`:
//   gemm                                     m, n, k, batch (optional, default 1)
//   flash_attention_fwd, flash_attention_bwd pairs, heads, head_dim, mean_len
//   memory_bound                             bytes
//   p2p_nvlink, p2p_network, p2p_pcie        bytes
//   all_reduce, all_gather, reduce_scatter,
//   all_to_all, broadcast                    bytes, size, ranks_per_node
struct OpMeasurement {
  std::string op;
  std::map<std::string, double> shape;
  double time_s = 0;
};

// Measurements file, CSV, one op per line: `op,key=value;key=value,time_s`, e.g.
//   gemm,m=8192;n=8192;k=8192,0.00441
//   all_reduce,bytes=268435456;size=8;ranks_per_node=8,0.00205
// An optional header line `op,shape,time_s`, blank lines and lines starting with '#' are
// skipped. Errors name the file and the line; unknown ops and missing or unknown keys are errors.
Expected<std::vector<OpMeasurement>> load_measurements(const std::filesystem::path& file);

// The model's time for one measurement (the op and keys as above; checked by load_measurements).
double predict_time_s(const CostModel& model, const OpMeasurement& m);

// Checks op name and shape keys; "" when fine, else what is wrong.
std::string validate_measurement(const OpMeasurement& m);

// Nelder–Mead minimization of f from x0 (coefficients 1, 2, 0.5, 0.5; first simplex x0 + step·eᵢ),
// at most max_evals evaluations. Shared by the op-level and the published-figure calibrations.
std::vector<double> nelder_mead(const std::function<double(const std::vector<double>&)>& f,
                                std::vector<double> x0, double step, int max_evals);

// The stack (experiments/stacks/ form) with the fitted efficiency values, as reached on the
// machine `hardware` (only its machine facts are read). `measurements_file` names the data in the
// new sources. Constants whose op family has no measurement, or that no measurement is sensitive
// to (LL latency when every message is large, say), keep their value and source; every other key
// of the stack (name, memory, fits) is kept.
Expected<json> calibrate_stack(const ClusterSpec& hardware, const json& stack,
                               const std::vector<OpMeasurement>& measurements,
                               const std::string& measurements_file = "measurements");

// How well a stack predicts one op family's measurements (calibrate prints it for the stack it
// started from and for the fitted one): count, rms of log(predicted / measured), and the worst
// measurement as predicted / measured with its shape.
struct FamilyError {
  std::string family;  // "gemm", "memory_bound", "attention_fwd", … (the fit's families)
  size_t n = 0;
  double rms_log = 0;
  double worst_ratio = 1;
  std::string worst;  // the worst measurement: "gemm m=1024;n=4096;k=4096"
  double measured_s = 0, predicted_s = 0;  // the family's times summed
};
Expected<std::vector<FamilyError>> op_family_errors(const ClusterSpec& hardware, const json& stack,
                                                    const std::vector<OpMeasurement>& measurements);
// The errors of `before` and `after` side by side, one line per family (what `cpbench calibrate` prints).
std::string format_family_errors(const std::vector<FamilyError>& before, const std::vector<FamilyError>& after);

// How the source of a constant fitted to `measurements_file` begins (calibrate_stack writes it).
std::string fitted_source_prefix(const std::string& measurements_file);

// Fitted constants that ended at a bound of their range (efficiency_param_table()): the data asked
// for a value the model does not allow (a GEMM rate of 0.01 of peak, an overhead of 1e-13 µs), so
// the constant is not a measurement and the data or the op family's other constants want a look.
// Reads an "efficiency" object as efficiency_to_json writes it and checks the constants whose
// source begins with `source_prefix` (those this fit wrote, not ones an earlier fit left). One
// message per constant: key, value, which bound, the range.
std::vector<std::string> fitted_constants_at_bounds(const json& efficiency, const std::string& source_prefix);

// The same for a machine and its stack written as one object: a hardware preset's machine facts
// with "memory" and "efficiency" beside them (core/runtime/local_measure builds cpu_local so);
// returns the object with the fitted "efficiency". Errors in the stack part name pointers of the
// object (/efficiency/KEY).
Expected<json> calibrate_preset(const json& preset, const std::vector<OpMeasurement>& measurements,
                                const std::string& measurements_file = "measurements");

}  // namespace cpbench
