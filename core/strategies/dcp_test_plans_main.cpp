// dcp_test_plans_main.cpp — writes the DCP plans the executed-plan tests run (executed_dcp_plans)
// to the file named by its argument, for executed_plans_gpu_test: a device machine runs carried
// binaries without MPI, so DCP's planner (Zoltan) cannot run there. The build writes
// build/dcp_test_plans.json with it; scripts/device_check.sh --prepare carries that file.
#include <cstdio>

#include "core/strategies/dcp_test_cases.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.json\n", argv[0]);
    return 2;
  }
  auto plans = cpbench::executed_dcp_plans();
  if (!plans) {
    std::fprintf(stderr, "dcp_test_plans: planning failed: %s\n", plans.error_str().c_str());
    return 1;
  }
  auto written = cpbench::write_attention_plans(argv[1], *plans);
  if (!written) {
    std::fprintf(stderr, "dcp_test_plans: %s\n", written.error_str().c_str());
    return 1;
  }
  std::printf("dcp_test_plans: %zu plans in %s\n", plans->size(), argv[1]);
  return 0;
}
