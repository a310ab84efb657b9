// local_measure.h — measures this machine as cpbench's cost model sees a device: SGEMM, memory
// bandwidth, the CPU flash-attention kernel, and MPI transfers between two ranks; and turns the
// measurements into a `cpu_local` hardware preset fitted by core/cost/calibrate.
// Requires: OpenBLAS, the CPU kernels; for transfers a Communicator of ≥ 2 ranks (on one host).
// Note: a CPU is described in the GPU vocabulary of the presets (cores as SMs, DRAM as HBM, the
// shared-memory MPI transport as the node-local link), so the simulator prices plans run here.
#pragma once

#include <string>
#include <vector>

#include "core/common/json_reader.h"
#include "core/cost/calibrate.h"
#include "core/runtime/communicator.h"

namespace cpbench {

struct LocalMeasurements {
  std::vector<OpMeasurement> ops;  // every timed op, for calibrate_preset and the CSV
  double sgemm_gflops = 0;         // best measured SGEMM rate
  double memory_GBps = 0;          // triad bandwidth
  double link_GBps = 0;            // large-message MPI bandwidth between ranks 0 and 1 (0: one rank)
  int cores = 1;
  double memory_gib = 0;
};

// Collective over `comm` (every rank calls it); rank 0's result holds the transfer measurements.
Expected<LocalMeasurements> measure_local(Communicator& comm);

// The measurements as a calibrate CSV (op,key=value;…,time_s).
std::string measurements_csv(const LocalMeasurements& m);

// A cpu_local preset: the datasheet-like fields from the measurements (each sourced as measured
// here), efficiency constants fitted to the measured ops by calibrate_preset.
Expected<json> local_preset(const LocalMeasurements& m, const json& efficiency_start, const std::string& csv_file);

}  // namespace cpbench
