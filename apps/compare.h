// compare.h — `cpbench compare`: a user's lengths file, model (preset or config.json) and cluster
// in; every strategy run on the same batches (core/experiment/compare.h), a ranked table on
// stdout, and in the output folder the runnable spec, results.json, report.md, speedup.svg and the
// winner's Megatron-LM arguments and torchtitan config.
// Requires: the sim backend only (no MPI launcher, no GPU).
#pragma once

#include <filesystem>
#include <string>

#include "core/experiment/compare.h"

namespace cpbench {

struct CompareArgs {
  CompareRequest request;
  std::string out = "compare";
  int jobs = 2;
  std::string command_line;  // as typed, for the report
};

// Exit 0 when every strategy ran or said why it could not; 2 for bad input (named); 1 when a
// point failed or an output could not be written.
int cmd_compare(const CompareArgs& args, const std::filesystem::path& experiments_dir);

}  // namespace cpbench
