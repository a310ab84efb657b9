#include "core/experiment/journal.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace cpbench {
namespace {

namespace fs = std::filesystem;

// Non-finite numbers are written as null (as in results.json) and read back as NaN, so a resumed
// point writes the same null into results.json as the run that computed it.
json number_map(const std::map<std::string, double>& m) {
  json j = json::object();
  for (const auto& [k, v] : m) j[k] = std::isfinite(v) ? json(v) : json(nullptr);
  return j;
}

std::map<std::string, double> read_number_map(const json& j) {
  std::map<std::string, double> m;
  for (const auto& [k, v] : j.items())
    m[k] = v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN();
  return m;
}

void check_number_map(JsonObject& line, const std::string& key) {
  const json* v = line.raw(key);
  if (!v) return line.error(key, "missing required key \"" + key + "\"");
  if (!v->is_object()) return line.error(key, "expected an object of name -> number, got " + json_type_name(*v));
  for (const auto& [name, x] : v->items())
    if (!x.is_number() && !x.is_null())
      line.diag().error(json_pointer_append(line.pointer_of(key), name),
                        "expected a number or null, got " + json_type_name(x));
}

}  // namespace

fs::path journal_path(const fs::path& dir) { return dir / "results.journal.jsonl"; }

Journal::~Journal() {
  if (file_) std::fclose(file_);
}

Status Journal::open(const fs::path& dir, const Spec& spec) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  path_ = journal_path(dir);
  file_ = std::fopen(path_.c_str(), "w");
  if (!file_) return Error{path_.string(), "", std::string("cannot open for writing: ") + std::strerror(errno)};
  const json header = {{"cpbench_journal", kJournalVersion}, {"experiment", spec.name}, {"spec", spec.resolved}};
  const std::string line = header.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    return Error{path_.string(), "", std::string("write failed: ") + std::strerror(errno)};
  return ok_status();
}

Status Journal::append(size_t index, const PointResult& r) {
  if (!file_) return Error{path_.string(), "", "journal is not open"};
  json j = {{"index", index}, {"id", r.id}, {"status", r.status}, {"reason", r.reason},
            {"metrics", number_map(r.metrics)}, {"timings", number_map(r.timings)}};
  // One write per line, flushed: a kill leaves whole lines and at most one cut-short last line.
  const std::string line = j.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    return Error{path_.string(), "", std::string("write failed: ") + std::strerror(errno)};
  return ok_status();
}

Status Journal::remove() {
  if (file_) std::fclose(file_);
  file_ = nullptr;
  std::error_code ec;
  fs::remove(path_, ec);
  if (ec) return Error{path_.string(), "", "cannot remove: " + ec.message()};
  return ok_status();
}

Status load_journal(const fs::path& path, const Spec& spec, PointResults& finished) {
  if (!fs::exists(path)) return ok_status();
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{path.string(), "", "cannot open for reading"};
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t line_no = 0;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = text.find('\n', begin);
    ++line_no;
    // A line without its newline was cut short by a kill: the point it held runs again.
    if (end == std::string::npos) break;
    const std::string where = path.string() + ":" + std::to_string(line_no);
    const json j = json::parse(text.begin() + begin, text.begin() + end, nullptr, false);
    begin = end + 1;
    if (j.is_discarded()) return Error{where, "", "not a JSON line (a damaged journal: delete it to start over)"};
    Diagnostics line(where);
    JsonObject o(j, "", line);
    if (line_no == 1) {
      o.integer("cpbench_journal", kJournalVersion, kJournalVersion);
      o.string("experiment");
      if (!o.has("spec")) o.error("spec", "missing required key \"spec\"");
      if (!line.ok()) return line.errors();
      if (j["spec"] != spec.resolved)
        return Error{where, "/spec",
                     "--resume: this journal was written for a different spec (or other --set values); run without "
                     "--resume to replace it, or choose another --out"};
      continue;
    }
    const int64_t index = o.integer("index", 0, static_cast<int64_t>(spec.points.size()) - 1);
    const std::string id = o.string("id");
    const std::string status = o.choice("status", {"ok", "infeasible", "error"});
    const std::string reason = o.string("reason");
    check_number_map(o, "metrics");
    check_number_map(o, "timings");
    o.finish();
    if (line.ok() && id != spec.points[index].id)
      o.error("id", "point " + std::to_string(index) + " of the spec is " + spec.points[index].id + ", not " + id);
    if (!line.ok()) return line.errors();
    if (status == "error") continue;  // errors run again, as with results.json
    finished[index] = PointResult{id, status, reason, read_number_map(j["metrics"]), read_number_map(j["timings"])};
  }
  return ok_status();
}

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    this->~RunLock();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  // The holder's line goes with the lock, so a later reader of the file finds no stale name.
  if (::ftruncate(fd_, 0) != 0) { /* the lock is released by close() all the same */ }
  ::close(fd_);  // releases the flock
  fd_ = -1;
}

Expected<RunLock> RunLock::acquire(const fs::path& dir, const std::string& holder) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Error{dir.string(), "", "cannot create the results folder: " + ec.message()};
  const fs::path file = dir / ".lock";
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Error{file.string(), "", std::string("cannot open the results folder's lock: ") + std::strerror(errno)};
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string who;
    char buf[512];
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    if (n > 0) who.assign(buf, static_cast<size_t>(n));
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    ::close(fd);
    if (err != EWOULDBLOCK) return Error{file.string(), "", std::string("cannot lock the results folder: ") + std::strerror(err)};
    return Error{dir.string(), "",
                 "another cpbench run is writing this results folder (" + (who.empty() ? "holder unknown" : who) +
                     "); wait for it to end, or give another --out"};
  }
  RunLock lock;
  lock.fd_ = fd;
  const std::string line = holder + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size()))
    return Error{file.string(), "", std::string("cannot write the results folder's lock: ") + std::strerror(errno)};
  return lock;
}

}  // namespace cpbench
