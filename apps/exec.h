// exec.h — `cpbench exec`: plan a batch with a CP layout, execute it on the MPI ranks of this job,
// compare with the single-device reference, and print per rank what it computed and moved.
// Requires: MPI (run under mpirun -np CP). Note: a failing or hanging rank ends every rank with a
// non-zero exit and a message naming it, within --timeout seconds.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace cpbench {

struct ExecArgs {
  std::string layout = "zigzag";
  std::string mask = "causal";
  std::vector<int64_t> lengths;     // explicit sequence lengths, or …
  std::string dataset;              // … a dataset preset sampled up to `tokens`
  int64_t tokens = 16384;
  uint64_t seed = 1;
  int heads = 8, kv_heads = 8, head_dim = 128, a2a_size = 0;
  bool pad = false, backward = false;
  double timeout_s = 120;
};

int cmd_exec(const ExecArgs& args, const std::filesystem::path& experiments_dir);

}  // namespace cpbench
