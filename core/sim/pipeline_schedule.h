// pipeline_schedule.h — per-stage order of pipeline operations (GPipe, 1F1B, interleaved 1F1B)
// and the task graph of a pipeline built from it.
// Requires: p stages, m micro-batches, v model chunks per stage (interleaving: m % p == 0).
// Note: orders follow Megatron-LM schedules.py; bubble fractions: GPipe and 1F1B (p−1)/m,
// interleaved (p−1)/(m·v) (Narayanan et al. SC'21 §2.2, references/ptdp.md).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/common/expected.h"
#include "core/sim/engine.h"

namespace cpbench {

// One operation of a stage: the forward or backward of a micro-batch through one model chunk
// (virtual stage) held by this stage. Chunk c of stage s is virtual stage c·p + s.
struct PipeOp {
  bool forward;
  int micro_batch;
  int chunk;
  bool operator==(const PipeOp&) const = default;
};

// [stage] -> that stage's operations in execution order.
using PipelineSchedule = std::vector<std::vector<PipeOp>>;

// kind:
//  "gpipe"       all m forwards, then all m backwards (in micro-batch order); v must be 1.
//  "1f1b"        PipeDream-Flush as in Megatron forward_backward_pipelining_without_interleaving:
//                min(p − stage − 1, m) warm-up forwards, then one forward / one backward pairs,
//                then the cool-down backwards; v must be 1.
//  "interleaved" Megatron forward_backward_pipelining_with_interleaving: the m·v virtual
//                micro-batches go in groups of p per chunk (forward k: chunk (k mod p·v) / p,
//                micro-batch (k / (p·v))·p + k mod p; backwards visit chunks in reverse);
//                warm-up (p − stage − 1)·2 + (v − 1)·p forwards (all m·v when m == p, as
//                Megatron does), then 1F1B pairs, then cool-down. Requires v >= 2, m % p == 0.
// Errors (Error with an empty file/pointer; the caller adds where p, m, v came from): unknown
// kind, p/m/v < 1, v not allowed for the kind, m not a multiple of p for "interleaved".
Expected<PipelineSchedule> pipeline_schedule(const std::string& kind, int p, int m, int v);

// The stage that consumes an op's output — the next virtual stage's forward, the previous one's
// backward (interleaving wraps around the stages) — or −1 for the last virtual stage's forward
// and the first one's backward. With p = 1 it is the op's own stage (nothing is sent).
int consumer_stage(int p, int v, int stage, const PipeOp& op);

// The op whose output an op on `stage` waits for: the forward of its micro-batch on the previous
// virtual stage, the backward on the next one, or for the last virtual stage's backward its own
// forward; none for the first virtual stage's forward. The micro-batch is the op's.
struct PipeInput {
  bool forward;
  int virtual_stage;
};
std::optional<PipeInput> pipe_input(int p, int v, int stage, const PipeOp& op);

// Task ids of an appended pipeline, [stage][index of the op in the schedule]; send is -1 where
// the op sends nothing (last virtual stage's forward, first one's backward, p = 1, zero time);
// done is the op's last task (its compute, or the last of its tail segments).
struct PipelineTasks {
  std::vector<std::vector<int>> compute, send, done;
};

// A blocking piece of an op that runs after its compute on another stream (a TP collective, a
// wait on CP transfers, a blocking pipeline send): the stage's next op starts after it.
struct OpSegment {
  int stream = 0;
  double duration_s = 0;
  char kind = 'm';
  std::string label;  // appended to the op's name: "F3.1 tp"
  bool carries_output = false;  // the op's output reaches its consumer with this segment (a send)
};
using OpTail = std::function<std::vector<OpSegment>(int stage, const PipeOp&)>;

// Appends the pipeline's tasks to g; stage s runs on device first_device + s.
//  - every op is a kind-'c' task on stream 0, in schedule order, named "F3.1" / "B3.1"
//    (micro-batch 3, chunk 1), lasting compute_s(stage, op);
//  - the forward of (mb, virtual stage j > 0) waits for the forward of (mb, j − 1): on the
//    previous stage, or on the last stage for chunk − 1 (interleaving wraps around); the
//    backward of (mb, j) waits for the backward of (mb, j + 1), and the backward of the last
//    virtual stage for its own forward;
//  - when the two ops are on different devices and p2p_s(stage, op) > 0, a kind-'m' transfer
//    "send F3.1" of that duration runs on the sender's stream 1 (activations, to the next
//    stage) or stream 2 (gradients, to the previous stage) after the op, and the receiver
//    waits for it; sends leave in the sender's compute order, so the FIFO streams never block
//    a transfer behind one that is not ready.
//  - tail(stage, op), when given, lists blocking segments after the op's compute, each a task
//    on its stream after the previous one; the stage's next op waits for the last, and the
//    consumer receives the output after the segment marked carries_output (else after the op's
//    compute, or its non-blocking send).
PipelineTasks append_pipeline_tasks(TaskGraph& g, const PipelineSchedule& schedule,
                                    const std::function<double(int stage, const PipeOp&)>& compute_s,
                                    const std::function<double(int stage, const PipeOp&)>& p2p_s,
                                    int first_device = 0, const OpTail& tail = {});

// When each op of the pipeline ends if nothing but its own durations delays it: its compute
// (compute_s) starts once the stage's previous op and its blocking tail (blocking_s) are done and
// its input's compute is; the op ends after its tail. [stage][index in the schedule]. The times
// append_pipeline_tasks' graph with these durations, no sends and no other tasks simulates, in
// one pass without a graph (a search bounds thousands of pipelines by it). An Error when the
// schedule waits on itself.
Expected<std::vector<std::vector<double>>> pipeline_op_ends(const PipelineSchedule& schedule,
                                                            const std::function<double(int stage, const PipeOp&)>& compute_s,
                                                            const std::function<double(int stage, const PipeOp&)>& blocking_s);

// The same with uniform costs: fwd_s / bwd_s per op (one micro-batch through one chunk) and
// p2p_s per transfer; devices 0..p−1.
TaskGraph build_pipeline_graph(const PipelineSchedule& schedule, double fwd_s, double bwd_s, double p2p_s);

}  // namespace cpbench
