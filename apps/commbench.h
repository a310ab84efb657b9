// commbench.h — `cpbench commbench`: nccl-tests' table of the job's communication (send/recv ring,
// all-to-all, all-gather, reduce-scatter, all-reduce over a range of sizes, each checked exactly)
// on MPI ranks or, with --backend nccl, on one GPU per rank; --csv writes `cpbench calibrate`'s rows.
// Requires: mpirun (or srun) with one process per rank; alone it runs on one rank. --backend nccl:
// a build with NCCL and a CUDA device per rank (rank r takes device local_rank % device_count).
// Note: exit 0 when every #wrong is 0; 1 when any is not (naming op and size; no CSV written), on a
// failed run, or when --backend nccl cannot run here (one line); 2 for bad arguments.
#pragma once

#include <string>

#include "core/runtime/commbench.h"

namespace cpbench {

struct CommbenchArgs {
  CommbenchOptions options;
  std::string backend = "mpi";  // mpi | nccl
  std::string csv;              // calibrate's measurements file, written by rank 0 ("" none)
};

int cmd_commbench(const CommbenchArgs& args);

}  // namespace cpbench
