#include "core/common/json_reader.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include <unistd.h>

namespace cpbench {

void Diagnostics::error(const std::string& pointer, std::string message) {
  if (origins_) {
    // The longest recorded prefix of `pointer` that is a whole path component.
    const Error* best = nullptr;
    size_t best_len = 0;
    for (const auto& [prefix, where] : *origins_) {
      bool is_prefix = pointer.compare(0, prefix.size(), prefix) == 0 &&
                       (pointer.size() == prefix.size() || pointer[prefix.size()] == '/');
      if (is_prefix && prefix.size() >= best_len) {
        best = &where;
        best_len = prefix.size();
      }
    }
    if (best) {
      errors_.list.push_back({best->file, best->pointer + pointer.substr(best_len), std::move(message)});
      return;
    }
  }
  errors_.list.push_back({file_, pointer.empty() ? "/" : pointer, std::move(message)});
}

std::string json_pointer_append(const std::string& pointer, const std::string& key) {
  std::string out = pointer + "/";
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string json_pointer_append(const std::string& pointer, size_t index) {
  return pointer + "/" + std::to_string(index);
}

std::string json_type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

const json& JsonObject::empty_object() {
  static const json e = json::object();
  return e;
}

JsonObject::JsonObject(const json& j, std::string pointer, Diagnostics& diag)
    : j_(&j), pointer_(std::move(pointer)), diag_(&diag) {
  if (!j.is_object()) {
    diag_->error(pointer_, "expected an object, got " + json_type_name(j));
    j_ = &empty_object();
  }
}

bool JsonObject::has(const std::string& key) const { return j_->contains(key); }

const json* JsonObject::get(const std::string& key, bool required) {
  used_.insert(key);
  auto it = j_->find(key);
  if (it == j_->end()) {
    if (required) diag_->error(pointer_of(key), "missing required key \"" + key + "\"");
    return nullptr;
  }
  return &*it;
}

static std::string bounds_text(double lo, double hi) {
  std::ostringstream s;
  s << "in [" << lo << ", " << hi << "]";
  return s.str();
}

double JsonObject::number_or(const std::string& key, double fallback, double lo, double hi) {
  const json* v = get(key, false);
  if (!v) return fallback;
  if (!v->is_number()) {
    error(key, "expected a number " + bounds_text(lo, hi) + ", got " + json_type_name(*v));
    return fallback;
  }
  double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    std::ostringstream s;
    s << "expected a number " << bounds_text(lo, hi) << ", got " << x;
    error(key, s.str());
    return fallback;
  }
  return x;
}

double JsonObject::number(const std::string& key, double lo, double hi) {
  if (!has(key)) {
    get(key, true);
    return lo;
  }
  return number_or(key, lo, lo, hi);
}

int64_t JsonObject::integer_or(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) {
  const json* v = get(key, false);
  if (!v) return fallback;
  if (!v->is_number_integer()) {
    error(key, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                   "], got " + json_type_name(*v) + (v->is_number() ? " " + v->dump() : ""));
    return fallback;
  }
  // An unsigned value above INT64_MAX (2^63) would wrap to a negative int64_t: report it as written.
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    error(key, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v->dump());
    return fallback;
  }
  int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) {
    error(key, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                   "], got " + std::to_string(x));
    return fallback;
  }
  return x;
}

int64_t JsonObject::integer(const std::string& key, int64_t lo, int64_t hi) {
  if (!has(key)) {
    get(key, true);
    return lo;
  }
  return integer_or(key, lo, lo, hi);
}

bool JsonObject::boolean_or(const std::string& key, bool fallback) {
  const json* v = get(key, false);
  if (!v) return fallback;
  if (!v->is_boolean()) {
    error(key, "expected true or false, got " + json_type_name(*v));
    return fallback;
  }
  return v->get<bool>();
}

bool JsonObject::boolean(const std::string& key) {
  if (!has(key)) {
    get(key, true);
    return false;
  }
  return boolean_or(key, false);
}

std::string JsonObject::string_or(const std::string& key, const std::string& fallback) {
  const json* v = get(key, false);
  if (!v) return fallback;
  if (!v->is_string()) {
    error(key, "expected a string, got " + json_type_name(*v));
    return fallback;
  }
  return v->get<std::string>();
}

std::string JsonObject::string(const std::string& key) {
  if (!has(key)) {
    get(key, true);
    return {};
  }
  return string_or(key, {});
}

static std::string join_options(const std::vector<std::string>& options) {
  std::string s;
  for (size_t i = 0; i < options.size(); ++i) s += (i ? ", \"" : "\"") + options[i] + "\"";
  return s;
}

std::string JsonObject::choice_or(const std::string& key, const std::string& fallback,
                                  const std::vector<std::string>& options) {
  const json* v = get(key, false);
  if (!v) return fallback;
  if (!v->is_string()) {
    error(key, "expected one of " + join_options(options) + ", got " + json_type_name(*v));
    return fallback;
  }
  auto s = v->get<std::string>();
  for (const auto& o : options)
    if (o == s) return s;
  error(key, "expected one of " + join_options(options) + ", got \"" + s + "\"");
  return fallback;
}

std::string JsonObject::choice(const std::string& key, const std::vector<std::string>& options) {
  if (!has(key)) {
    get(key, true);
    return options.empty() ? std::string() : options.front();
  }
  return choice_or(key, options.empty() ? std::string() : options.front(), options);
}

const json* JsonObject::raw(const std::string& key) { return get(key, false); }

JsonObject JsonObject::object(const std::string& key) {
  const json* v = get(key, true);
  return JsonObject(v ? *v : empty_object(), pointer_of(key), *diag_);
}

std::optional<JsonObject> JsonObject::object_opt(const std::string& key) {
  const json* v = get(key, false);
  if (!v) return std::nullopt;
  return JsonObject(*v, pointer_of(key), *diag_);
}

const json& JsonObject::array(const std::string& key) {
  static const json empty_array = json::array();
  const json* v = get(key, true);
  if (!v) return empty_array;
  if (!v->is_array()) {
    error(key, "expected an array, got " + json_type_name(*v));
    return empty_array;
  }
  return *v;
}

void JsonObject::finish() {
  for (const auto& [key, value] : j_->items()) {
    if (used_.count(key)) continue;
    std::string allowed;
    for (const auto& u : used_) allowed += (allowed.empty() ? "\"" : ", \"") + u + "\"";
    diag_->error(pointer_of(key), "unknown key \"" + key + "\"" +
                                      (allowed.empty() ? "" : " (expected one of " + allowed + ")"));
  }
}

Expected<json> load_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return Error{path.string(), "", "cannot open the file"};
  std::stringstream buf;
  buf << in.rdbuf();
  std::string text = buf.str();
  // JSON allows an object to repeat a key and nlohmann keeps the last value silently; a repeated
  // key in a spec or preset is almost always an edit that did not take effect, so it is an error.
  // The callback tracks the JSON pointer of the container being parsed to name the second copy.
  struct Frame {
    bool array = false;
    size_t next_index = 0;
    std::string pointer, key;
    std::set<std::string> keys;
  };
  std::vector<Frame> frames;
  std::optional<Error> duplicate;
  auto element_pointer = [&frames]() {
    if (frames.empty()) return std::string();
    Frame& parent = frames.back();
    return parent.array ? json_pointer_append(parent.pointer, parent.next_index++)
                        : json_pointer_append(parent.pointer, parent.key);
  };
  // No cpbench file nests deeper than a handful of levels; a hostile or broken one nested a
  // million deep would grow the pointers above quadratically, so it ends the parse as an error.
  constexpr size_t kMaxDepth = 256;
  struct TooDeep {
    std::string pointer;
  };
  json::parser_callback_t check = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start: {
        if (frames.size() >= kMaxDepth) throw TooDeep{frames.back().pointer.substr(0, 80)};
        std::string pointer = element_pointer();
        frames.push_back({event == json::parse_event_t::array_start, 0, std::move(pointer), {}, {}});
        break;
      }
      case json::parse_event_t::key: {
        Frame& f = frames.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second && !duplicate)
          duplicate = Error{path.string(), json_pointer_append(f.pointer, f.key),
                            "duplicate key \"" + f.key + "\" (only one of its values would be read; remove the other)"};
        break;
      }
      case json::parse_event_t::value:
        if (!frames.empty() && frames.back().array) ++frames.back().next_index;
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames.pop_back();
        break;
    }
    return true;
  };
  try {
    json j = json::parse(text, check);
    if (duplicate) return *duplicate;
    return j;
  } catch (const TooDeep& deep) {
    return Error{path.string(), "", "nested deeper than " + std::to_string(kMaxDepth) + " levels (at " + deep.pointer +
                                        "…): not a cpbench file"};
  } catch (const json::parse_error& e) {
    // Turn the byte offset into a line and column a user can find.
    size_t line = 1, col = 1;
    for (size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return Error{path.string(), "", "invalid JSON at line " + std::to_string(line) + ", column " +
                                        std::to_string(col) + ": " + e.what()};
  }
}

Status write_file_atomic(const std::filesystem::path& path, const std::string& text) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return Error{path.string(), "", "is a folder: give the path of a file to write"};
  if (path.has_parent_path()) {
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) return Error{path.parent_path().string(), "", "cannot create the folder: " + ec.message()};
  }
  auto tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Error{tmp.string(), "", "cannot open for writing"};
    out << text;
    out.flush();
    if (!out) return Error{tmp.string(), "", "write failed"};
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    return Error{path.string(), "", "cannot move the written file into place: " + why};
  }
  return ok_status();
}

}  // namespace cpbench
