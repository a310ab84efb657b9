// commbench.h — nccl-tests' measurement over any Communicator: for each operation (send/recv
// ring, all-to-all, all-gather, reduce-scatter, all-reduce) and buffer size, the mean time per
// iteration of the slowest rank, algbw, busbw and the #wrong of one checked iteration; reported as
// nccl-tests' table and as `cpbench calibrate`'s measurements CSV.
// Requires: every rank of the communicator calls run_commbench together with the same options; the
// buffers come from a BufferMemory (host memory for MPI, a device's for NCCL).
// Note: sizes follow nccl-tests (its doc/PERFORMANCE.md): the size is each rank's whole buffer — the
// output of all-gather, the input of reduce-scatter, the buffer of all-reduce and all-to-all, the
// message of send/recv — which is also the `bytes` of CostModel::collective_s (core/cost/comm.cpp).
// Values are float32 small integers, so every sum is exact and outputs are compared exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/common/expected.h"
#include "core/runtime/communicator.h"

namespace cpbench {

// Where the benchmark's buffers live, as a struct of functions: host memory (MPI, threads) or a
// device's (NCCL; apps/commbench.cpp). upload and download copy float32 values between host and
// the buffers and are done when they return.
struct BufferMemory {
  const char* name;  // "host", "cuda"
  Expected<void*> (*allocate)(std::size_t bytes);
  void (*release)(void* buffer);
  Status (*upload)(void* dst, const float* src, std::size_t count);
  Status (*download)(float* dst, const void* src, std::size_t count);
};
const BufferMemory& host_buffer_memory();

// One operation, as nccl-tests' testColl: how its buffers are sized, what it computes, its bus factor.
struct CommbenchOp {
  const char* name;       // "all_reduce", … (also the calibrate op; "sendrecv" has none of its own)
  const char* redop;      // nccl-tests' redop column: "sum" or "none"
  bool in_place;          // one buffer, input and output (all_reduce: the Communicator's is in place)
  bool blocks;            // its buffer is size() equal blocks: the count is rounded down to a multiple
  double (*bus_factor)(int ranks);  // busbw / algbw (nccl-tests' PERFORMANCE.md)
  // Elements of the input and the output buffer for a size of `count` elements.
  std::size_t (*input_count)(std::size_t count, int ranks);
  std::size_t (*output_count)(std::size_t count, int ranks);
  // One iteration on `in` and `out` (the same buffer when in_place).
  Status (*run)(Communicator& comm, const float* in, float* out, std::size_t count);
  // Element i of rank `rank`'s output, from every rank's input (commbench_input).
  float (*expected)(std::uint64_t seed, int rank, int ranks, std::size_t count, std::size_t i);
};
// sendrecv, all_to_all, all_gather, reduce_scatter, all_reduce: the default order of a run.
const std::vector<CommbenchOp>& commbench_ops();
const CommbenchOp* find_commbench_op(const std::string& name);

// Element i of rank `rank`'s input: a small integer from −8 to 8 hashed from (seed, rank, i). A
// sum over up to 2^20 ranks stays below 2^24 in magnitude, exact in float32 in any order.
float commbench_input(std::uint64_t seed, int rank, std::size_t i);

struct CommbenchOptions {
  std::vector<std::string> ops;  // names in commbench_ops(); empty: all of them
  std::uint64_t min_bytes = 8, max_bytes = std::uint64_t{1} << 30;
  std::uint64_t step_factor = 2;  // sizes min, min·f, min·f², … up to max
  int iters = 20, warmup = 5;
  std::uint64_t seed = 1;
  // Tests only: called on every rank after the checked iteration, before its output is compared
  // (plants a wrong element in the receive buffer, say).
  std::function<void(const CommbenchOp& op, void* output, std::size_t count)> after_checked_iteration;
};

// One (op, size): one line of nccl-tests' table, one row of the calibrate CSV.
struct CommbenchRow {
  std::string op;
  std::uint64_t bytes = 0;  // nccl-tests' size: each rank's whole buffer
  std::uint64_t count = 0;  // float32 elements of that buffer
  std::string redop;
  double time_s = 0;        // each rank's mean per timed iteration; the slowest rank's
  double algbw_GBps = 0;    // bytes / time_s
  double busbw_GBps = 0;    // algbw · the op's bus factor
  std::uint64_t wrong = 0;  // wrong elements of the checked iteration, summed over the ranks
};
// Called on every rank with each row as soon as it is measured (the CLI prints it on rank 0).
using CommbenchRowSink = std::function<void(const CommbenchRow& row)>;

// Where the ranks run, for the report's header and the CSV's rows (the CLI finds it: MPI's
// shared-memory split).
struct CommbenchContext {
  std::string backend;  // "mpi", "nccl"
  int ranks = 1;
  int ranks_per_node = 1;  // the most ranks on one host
  int hosts = 1;
  std::string devices;  // "#  Rank  0 Pid … on HOST …" lines, one per rank (may be empty)
};

// Bytes of the two buffers run_commbench allocates: the largest input and output of its ops' sizes.
std::uint64_t commbench_buffer_bytes(const CommbenchOptions& options, int ranks);

// Sizes of one op in the run: `options`' sizes, each rounded down to whole elements (and to a
// multiple of `ranks` for a blocked op); sizes that round to nothing are left out.
std::vector<std::uint64_t> commbench_counts(const CommbenchOp& op, const CommbenchOptions& options, int ranks);

// Runs every op of `options` over every size: warm-up, timed iterations (after a barrier), then one
// checked iteration (inputs from commbench_input, outputs set to NaN first), the times' maximum and
// the wrong counts' sum taken over the ranks. Every rank gets the same rows. An error of the
// communicator or the memory ends the run.
Expected<std::vector<CommbenchRow>> run_commbench(Communicator& comm, const BufferMemory& memory,
                                                  const CommbenchOptions& options,
                                                  const CommbenchRowSink& on_row = nullptr);

// Rank `rank`'s wrong elements in `output` (count output elements of `op` at a size of
// `size_count` elements), downloaded piece by piece through `memory`.
Expected<std::uint64_t> count_wrong_elements(const CommbenchOp& op, const BufferMemory& memory, const void* output,
                                             std::size_t size_count, std::uint64_t seed, int rank, int ranks);

// nccl-tests' table, in three parts so rows print as they come: the header (lines starting with '#'
// naming the backend, ranks, ranks per node, hosts, the parameters and the devices); a row (after
// its op's heading and column names when `previous` is null or another op's: size(B) count type
// redop time(us) algbw(GB/s) busbw(GB/s) #wrong); the footer (wrong elements in sum and the final
// "# Avg bus bandwidth" over every row). format_commbench_table is the three together.
std::string format_commbench_header(const CommbenchContext& context, const CommbenchOptions& options);
std::string format_commbench_row(const CommbenchRow& row, const CommbenchRow* previous);
std::string format_commbench_footer(const std::vector<CommbenchRow>& rows);
std::string format_commbench_table(const CommbenchContext& context, const CommbenchOptions& options,
                                   const std::vector<CommbenchRow>& rows);

// `cpbench calibrate`'s measurements file (core/cost/calibrate.h): a '#' line of provenance, the
// header `op,shape,time_s`, a row per collective size (bytes, size, ranks_per_node) and per
// sendrecv size (p2p_network when the ranks span hosts, else p2p_nvlink). Needs 2 ranks or more: a
// collective of one rank moves nothing the cost model prices.
std::string format_commbench_csv(const CommbenchContext& context, const CommbenchOptions& options,
                                 const std::vector<CommbenchRow>& rows);

}  // namespace cpbench
