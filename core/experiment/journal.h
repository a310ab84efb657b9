// journal.h — the run journal: DIR/results.journal.jsonl, one JSON line per finished point,
// appended as points finish, so a sweep costs O(points) in writing instead of rewriting
// results.json (O(points) each) after every point, which made a sweep's cost O(points²).
// Requires: results.h. Line 1 is a header naming the resolved spec; each later line is one
// point: {"index", "id", "status", "reason", "metrics", "timings"}, in the order points finished.
// Note: results.json is written at the start and at the end of a run (and on an interrupt); the
// journal is removed once results.json holds everything, so only a killed run leaves one, and
// --resume reads it beside results.json. A last line cut short by a kill is ignored.
#pragma once

#include <cstdio>
#include <filesystem>

#include "core/experiment/results.h"

namespace cpbench {

inline constexpr int kJournalVersion = 1;

// The journal's path for results written to `dir` (beside results.json).
std::filesystem::path journal_path(const std::filesystem::path& dir);

class Journal {
 public:
  Journal() = default;
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  ~Journal();

  // Starts an empty journal for `spec` (an earlier one is replaced: the caller has already
  // written what it held into results.json).
  Status open(const std::filesystem::path& dir, const Spec& spec);
  // Appends one finished point (spec.points[index]) and flushes it to the OS, so a killed run
  // keeps every point whose line was written.
  Status append(size_t index, const PointResult& result);
  // Closes and deletes the journal: results.json now holds every point it listed.
  Status remove();

 private:
  std::FILE* file_ = nullptr;
  std::filesystem::path path_;
};

// One run at a time per results folder: `cpbench run` holds DIR/.lock (an flock, released by the
// kernel when the process ends, however it ends) while it writes DIR, and the file names the
// holder. A second run into the same folder — another --set, or a --resume while the first still
// runs — would overwrite results.json and the journal under the first: it is refused instead.
class RunLock {
 public:
  RunLock() = default;
  RunLock(RunLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock();

  // Takes DIR/.lock (creating DIR) and writes `holder` (the command, pid, host and time) into it.
  // Error: another process holds it — the error names the holder it wrote — or DIR cannot be
  // created or locked (named).
  static Expected<RunLock> acquire(const std::filesystem::path& dir, const std::string& holder);

 private:
  int fd_ = -1;
};

// Adds the finished points (ok or infeasible; errors are run again) of `journal` to `finished`,
// a later line replacing an earlier one. No file is no points. Errors name the file, the line and
// what was expected; a journal of a different spec (or other --set values) is an error.
Status load_journal(const std::filesystem::path& journal, const Spec& spec, PointResults& finished);

}  // namespace cpbench
