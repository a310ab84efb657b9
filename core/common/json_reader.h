// json_reader.h — strict reading of JSON input: typed getters that record an error naming the
// file, the JSON pointer and what was expected; unknown keys are errors.
// Requires: nlohmann/json. Every data file (specs, hardware, models, datasets) is read this way,
// so a misspelled key or a wrong type anywhere gets the same kind of message.
// Note: getters return a fallback after recording an error, so a parser runs to the end and
// reports every problem at once; check Diagnostics::ok() before using what it built.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/common/expected.h"

namespace cpbench {

using nlohmann::json;

// Collects the errors of one parse. A merged document (a spec with a case, grid values and
// --set overrides applied) carries `origins`: where each overridden value was written, so an
// error names the place the user has to edit rather than the merged document.
class Diagnostics {
 public:
  explicit Diagnostics(std::string file) : file_(std::move(file)) {}

  // pointer in the merged document -> "file: pointer" text of its source, longest prefix wins.
  void set_origins(const std::map<std::string, Error>* origins) { origins_ = origins; }

  void error(const std::string& pointer, std::string message);
  // Errors found elsewhere (a preset file that failed to load) are kept as they are.
  void add(const Errors& errors) { errors_.list.insert(errors_.list.end(), errors.list.begin(), errors.list.end()); }
  bool ok() const { return errors_.list.empty(); }
  const Errors& errors() const { return errors_; }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
  const std::map<std::string, Error>* origins_ = nullptr;
  Errors errors_;
};

// RFC 6901: '~' -> "~0", '/' -> "~1".
std::string json_pointer_append(const std::string& pointer, const std::string& key);
std::string json_pointer_append(const std::string& pointer, size_t index);

// Human name of a JSON value's type, for messages ("a number", "a string", ...).
std::string json_type_name(const json& j);

class JsonObject {
 public:
  // Records an error when `j` is not an object (the getters then see an empty object).
  JsonObject(const json& j, std::string pointer, Diagnostics& diag);

  bool has(const std::string& key) const;
  const std::string& pointer() const { return pointer_; }
  std::string pointer_of(const std::string& key) const { return json_pointer_append(pointer_, key); }
  Diagnostics& diag() { return *diag_; }
  void error(const std::string& key, std::string message) { diag_->error(pointer_of(key), std::move(message)); }

  // Required values; bounds are inclusive.
  double number(const std::string& key, double lo, double hi);
  int64_t integer(const std::string& key, int64_t lo, int64_t hi);
  bool boolean(const std::string& key);
  std::string string(const std::string& key);
  std::string choice(const std::string& key, const std::vector<std::string>& options);

  // Optional values: the fallback when absent (and after an error).
  double number_or(const std::string& key, double fallback, double lo, double hi);
  int64_t integer_or(const std::string& key, int64_t fallback, int64_t lo, int64_t hi);
  bool boolean_or(const std::string& key, bool fallback);
  std::string string_or(const std::string& key, const std::string& fallback);
  std::string choice_or(const std::string& key, const std::string& fallback,
                        const std::vector<std::string>& options);

  // A value of any type, marked as used; nullptr when absent.
  const json* raw(const std::string& key);
  // A required nested object; an error (and an empty object) when absent or not an object.
  JsonObject object(const std::string& key);
  std::optional<JsonObject> object_opt(const std::string& key);
  // A required array; an error (and an empty array) when absent or not an array.
  const json& array(const std::string& key);

  // Records an error for every key no getter asked for, naming the allowed keys.
  void finish();

 private:
  const json* get(const std::string& key, bool required);
  static const json& empty_object();

  const json* j_;
  std::string pointer_;
  Diagnostics* diag_;
  std::set<std::string> used_;
};

// Reads and parses a JSON file; errors name the file and the line/column of a syntax error.
Expected<json> load_json_file(const std::filesystem::path& path);

// Writes `text` to `path` atomically: a temporary file in the same folder, then rename(2), so
// a reader (or a killed run) never sees a half-written file.
Status write_file_atomic(const std::filesystem::path& path, const std::string& text);

}  // namespace cpbench
