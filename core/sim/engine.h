// engine.h — discrete-event simulation of tasks with known durations on devices and streams.
// Requires: durations from the cost model; tasks and their dependencies built by a lowering.
// Note: a stream runs its tasks in the order they were added (like a CUDA stream); deadlock
// (a cycle, a collective that can never assemble) is a bug in the lowering: see simulate().
//
// Vocabulary: a *device* is a simulated rank (often one representative per pipeline stage); a
// *stream* is a queue of that device (0 = compute, 1.. = communication streams); a *link* is a
// resource shared by several streams or devices (a node's NIC) whose tasks serialize; a
// *collective* is a set of tasks (one per participant) that start at the same instant.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/common/expected.h"

namespace cpbench {

struct TaskSpec {
  int device = 0;            // simulated device (a representative rank), >= 0
  int stream = 0;            // stream on that device: 0 compute, 1.. communication streams
  double duration_s = 0;     // >= 0, finite
  std::vector<int> deps;     // task ids that must finish first (any id of the graph)
  int collective = -1;       // tasks sharing a collective id start together, when all are ready
  int link = -1;             // a shared resource (a NIC): its tasks run one at a time
  std::string name;          // for the trace ("F3.1" = forward of micro-batch 3, chunk 1)
  char kind = 'c';           // 'c' compute, 'm' communication, 'o' other (optimizer...)
  // A communication the device's compute stream waits for by construction (a blocking collective
  // or send issued on a side stream): its whole duration is exposed on its device.
  bool blocking = false;
  // Contention. A communication task (kind 'm') running beside compute on its device holds
  // sm_share of the SMs and hbm_share of the HBM bandwidth; the device's stream-0 compute task
  // (kind 'c' or 'o') then runs at rate 1 − Σ (sm_bound·sm_share + (1 − sm_bound)·hbm_share)
  // over the communication tasks running at that instant (at least kMinComputeRate), so it ends
  // later than start + duration_s. sm_bound: the share of the compute task's work bound by the
  // SMs (GEMM, attention) rather than by HBM (element-wise kernels, the optimizer).
  double sm_share = 0, hbm_share = 0;
  double sm_bound = 1;
};

// The slowest a compute task runs under contention (a floor against shares that sum past 1).
inline constexpr double kMinComputeRate = 0.1;

class TaskGraph {
 public:
  // Returns the new task's id (0, 1, 2, ...). Dependencies may name tasks added later; they
  // are checked by simulate(). The order of add() calls is the order on each stream.
  int add(TaskSpec t);
  // Adds a dependency after the fact (a lowering that allocates ids before knowing all edges).
  void add_dep(int task, int dep) { tasks_.at(task).deps.push_back(dep); }
  // A task's fields after the fact (contention shares, sm_bound); ids and deps stay valid.
  TaskSpec& at(int task) { return tasks_.at(task); }
  // Makes a task a member of a collective after the fact (members start together).
  void set_collective(int task, int collective) { tasks_.at(task).collective = collective; }

  size_t size() const { return tasks_.size(); }
  const TaskSpec& task(int id) const { return tasks_.at(id); }
  const std::vector<TaskSpec>& tasks() const { return tasks_; }
  int device_count() const { return device_count_; }  // 1 + the largest device id
  int stream_count() const { return stream_count_; }  // 1 + the largest stream id
  void reserve(size_t n) { tasks_.reserve(n); }

 private:
  std::vector<TaskSpec> tasks_;
  int device_count_ = 0;
  int stream_count_ = 0;
};

struct SimResult {
  double makespan_s = 0;               // the latest end time (all tasks start at >= 0)
  std::vector<double> start_s, end_s;  // per task id
  // Per device (index = device id, size = graph.device_count()):
  // compute_busy_s: summed durations of the compute stream's (stream 0) tasks of kind 'c' and
  //   'o'. A kind-'m' task placed on stream 0 (a blocking collective) is not compute.
  // exposed_comm_s: time the compute stream sat idle waiting for communication. For each
  //   stream-0 task T: free = end of the previous stream-0 task of the device (0 for the first),
  //   r_o = latest end of T's deps not of kind 'm'; if T has kind-'m' deps, let D be the one
  //   that ended last and in_D the latest end of D's own deps (0 if none); T adds
  //   max(0, min(start_T, end_D) − max(free, r_o, in_D)): the idle time before T after the
  //   stream was free, the other inputs had arrived and D's data existed — the transfer
  //   itself, and its queueing behind other transfers (stream, link) or collective partners.
//   compute_busy_s counts a stream-0 task's end − start, which contention may stretch.
  //   A kind-'m' task on stream 0 (a blocking collective) adds its duration too. Waiting for
  //   another device's compute (the pipeline bubble) is not exposed communication.
  // comm_busy_s: summed durations of the device's kind-'m' tasks, on any stream.
  // contention_s: the time the device's compute tasks ran longer than their durations because
  //   communication kernels shared the GPU with them (included in compute_busy_s).
  std::vector<double> compute_busy_s, exposed_comm_s, comm_busy_s, contention_s;
};

// Runs the graph. Start rule: a task starts at the earliest time when the previous task of
// its stream has ended, all its deps have ended, and — for a collective — every member is
// ready (then all members start at that instant); a task with a link then also waits until the
// link is free, links serving waiting tasks first-come first-served (ties: the one that became
// ready first in event order, which is deterministic). A task may not be both a collective
// member and on a link (model the transfer as a separate task).
// Cost: O((N + E) log N) time, O(N + E) memory, for N tasks and E dependency edges.
//
// Errors: an invalid graph (a dep id out of range, a negative or non-finite duration, a
// negative device/stream, a collective member on a link) or a deadlock (a dependency cycle
// through deps and stream order; a collective whose members wait on each other) is a bug in
// the code that built the graph, not bad user input: simulate() throws std::logic_error whose
// message names the tasks involved (for a deadlock, the wait cycle, "task 7 'F1.0' (device 1,
// stream 0) waits for task 3 ..."). simulate_checked() returns the same message as an Error.
SimResult simulate(const TaskGraph& g);
Expected<SimResult> simulate_checked(const TaskGraph& g);

}  // namespace cpbench
