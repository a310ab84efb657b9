// streams.h — the streams of a simulated device, named once for the three graphs the simulator
// builds: a training step (iteration.cpp), one layer's ops (layer_cost.cpp) and one layer's CP
// attention (attention_sim.cpp). A stream is a queue of one device that runs its tasks in order
// (engine.h); stream 0 is always the device's compute stream, the one the engine counts as busy
// time. A number means one thing within a graph; the graphs are built and simulated apart, and
// each has its track names for the trace.
// Requires: nothing beyond the standard library.
#pragma once

#include <string>
#include <vector>

namespace cpbench {

// A training step: one device per (pipeline stage, DP×CP rank).
namespace step_stream {
inline constexpr int compute = 0;
inline constexpr int pp_send_fwd = 1;   // pipeline sends of activations
inline constexpr int pp_send_bwd = 2;   // pipeline sends of gradients
inline constexpr int dp = 3;            // data-parallel gradient reduction and parameter all-gather
inline constexpr int tp = 4;            // tensor-parallel collectives
inline constexpr int cp = 5;            // context-parallel transfers the attention waits for
inline constexpr int host = 6;          // the host issuing kernels the compute stream waits for
inline constexpr int copy_out = 7;      // activation offloading: device to host (a copy engine)
inline constexpr int copy_in = 8;       // and back, host to device (the other direction's engine)
inline constexpr int param_gather = 9;  // overlap_param_gather: the previous step's parameter all-gather
}  // namespace step_stream
inline const std::vector<std::string> kStepStreamNames = {"compute", "pp send fwd", "pp send bwd", "dp",
                                                          "tp",      "cp",          "host",        "copy d2h",
                                                          "copy h2d", "dp param gather"};

// One layer's ops on one rank (LayerOp::stream); the trace's tracks of the two-layer graph.
enum class OpStream { compute, tp, cp, dp };
inline const std::vector<std::string> kLayerStreamNames = {"compute", "tp", "cp", "dp", "host"};

// One layer's CP attention: one device per CP rank.
namespace attention_stream {
inline constexpr int kernels = 0;     // the tile kernels (a fused stage's one call)
inline constexpr int transfers = 1;   // the rank's sends, each holding its link
inline constexpr int wait_point = 2;  // zero-length markers: a phase's end, what the next waits for
inline constexpr int host = 3;        // the runtime's per-sequence host work (TE's a2a loop)
inline constexpr int all_to_all = 4;  // an all-to-all's latency, every rank together
}  // namespace attention_stream
inline const std::vector<std::string> kAttentionStreamNames = {"kernels", "transfers", "wait points", "host",
                                                               "all-to-all"};

}  // namespace cpbench
