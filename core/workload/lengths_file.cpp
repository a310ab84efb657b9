#include "core/workload/lengths_file.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

namespace cpbench {

namespace fs = std::filesystem;

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// One CSV record's fields (RFC 4180 quoting: "a, b" is one field, "" an escaped quote). A data
// pipeline's CSV may carry text columns beside the length.
std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') fields.back() += '"', ++i;
      else if (c == '"') quoted = false;
      else fields.back() += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  for (auto& f : fields) f = trim(f);
  return fields;
}

bool is_length_text(const std::string& t) {
  return !t.empty() && t.size() <= 10 && t.find_first_not_of("0123456789") == std::string::npos;
}

std::string range_text() { return "an integer length in tokens in [1, " + std::to_string(kMaxLengthTokens) + "]"; }

class Reader {
 public:
  explicit Reader(std::string column) : column_(std::move(column)) { out_.column = column_; }

  void read_text(const fs::path& file);
  void read_json_lines(const fs::path& file);
  Expected<LengthsFile> finish(const fs::path& path) {
    if (!errors_.list.empty()) return errors_;
    if (out_.lengths.empty())
      return Error{path.string(), "", "holds no lengths (expected " + std::string(column_.empty() ? "" : "column \"" + column_ + "\" with ") +
                                          "one length in tokens per row)"};
    return std::move(out_);
  }

 private:
  // Up to 20 bad lines are reported; the rest are counted in the last message.
  void bad(const fs::path& file, size_t line, const std::string& message) {
    if (++bad_lines_ <= 20) errors_.list.push_back({file.string() + ":" + std::to_string(line), "", message});
  }
  void add(uint32_t file, size_t line, int64_t tokens) {
    out_.lengths.push_back(tokens);
    out_.file_of.push_back(file);
    out_.line_of.push_back(line);
  }
  uint32_t open(const fs::path& file, std::ifstream& in) {
    in.open(file);
    if (!in) errors_.list.push_back({file.string(), "", "cannot open the lengths file"});
    out_.files.push_back(file.string());
    return static_cast<uint32_t>(out_.files.size() - 1);
  }

  std::string column_;
  LengthsFile out_;
  Errors errors_;
  size_t bad_lines_ = 0;
};

void Reader::read_text(const fs::path& file) {
  std::ifstream in;
  const uint32_t index = open(file, in);
  if (!in) return;
  std::string line;
  int column = -1;   // the field read; -1 until the first record says (header or not)
  size_t fields = 0;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    const std::vector<std::string> row = split_csv(t);
    if (column < 0) {
      fields = row.size();
      const bool header = !std::all_of(row.begin(), row.end(), is_length_text);
      if (header) {
        auto at = [&](const std::string& name) { return std::find(row.begin(), row.end(), name) - row.begin(); };
        if (!column_.empty()) {
          column = static_cast<int>(at(column_));
        } else if (row.size() == 1) {
          column = 0;
        } else {
          column = static_cast<int>(row.size());
          for (const auto& name : known_length_columns())
            if (at(name) < static_cast<long>(row.size())) {
              column = static_cast<int>(at(name));
              break;
            }
        }
        if (column >= static_cast<int>(row.size())) {
          std::string names;
          for (const auto& f : row) names += (names.empty() ? "\"" : ", \"") + f + "\"";
          bad(file, line_no,
              (column_.empty() ? "no column of token counts in the header (" + names +
                                     "): name it (--column, or \"column\" in a profile)"
                               : "no column \"" + column_ + "\" in the header (" + names + ")"));
          return;
        }
        out_.column = row[column];
        continue;
      }
      if (row.size() > 1 || !column_.empty()) {
        bad(file, line_no, "expected one length per line, or a header line naming the columns; got \"" + t + "\"");
        return;
      }
      column = 0;
    }
    if (row.size() != fields) {
      bad(file, line_no, "expected " + std::to_string(fields) + " fields as on the first line, got " +
                             std::to_string(row.size()));
      continue;
    }
    const std::string& v = row[column];
    const int64_t x = is_length_text(v) ? std::stoll(v) : 0;
    if (x < 1 || x > kMaxLengthTokens) {
      bad(file, line_no, "expected " + range_text() + ", got \"" + v + "\"");
      continue;
    }
    add(index, line_no, x);
  }
}

void Reader::read_json_lines(const fs::path& file) {
  std::ifstream in;
  const uint32_t index = open(file, in);
  if (!in) return;
  std::string line;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    if (trim(line).empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      bad(file, line_no, "expected a JSON object on each line");
      continue;
    }
    std::string field = column_;
    if (field.empty())
      for (const auto& name : known_length_columns())
        if (j.contains(name)) {
          field = name;
          break;
        }
    if (field.empty() || !j.contains(field)) {
      std::string names;
      for (const auto& name : known_length_columns()) names += (names.empty() ? "\"" : ", \"") + name + "\"";
      bad(file, line_no, field.empty() ? "no token-count field (looked for " + names + "): name it (--column)"
                                       : "no field \"" + field + "\"");
      continue;
    }
    out_.column = field;
    const nlohmann::json& v = j[field];
    double x = 0;
    if (v.is_array()) x = static_cast<double>(v.size());  // the tokens themselves
    else if (v.is_number()) x = v.get<double>();
    if (!(x >= 1 && x <= double(kMaxLengthTokens) && x == std::floor(x))) {
      bad(file, line_no, "expected \"" + field + "\" to be " + range_text() + " or an array of tokens, got " + v.dump());
      continue;
    }
    add(index, line_no, static_cast<int64_t>(x));
  }
}

bool is_json_lines(const fs::path& p) { return p.extension() == ".jsonl" || p.extension() == ".ndjson"; }

}  // namespace

const std::vector<std::string>& known_length_columns() {
  static const std::vector<std::string> names = {"length", "num_tokens", "tokens", "token_count", "n_tokens",
                                                 "length_tokens", "seq_len", "seqlen", "input_ids"};
  return names;
}

std::string LengthsFile::where(size_t i) const {
  return files.at(file_of.at(i)) + ":" + std::to_string(line_of.at(i));
}

Expected<LengthsFile> read_lengths_file(const fs::path& path, const std::string& column) {
  Reader reader(column);
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file() && is_json_lines(e.path())) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    if (files.empty()) return Error{path.string(), "", "a folder of lengths must hold *.jsonl or *.ndjson files; it holds none"};
    for (const auto& f : files) reader.read_json_lines(f);
  } else if (!fs::exists(path, ec)) {
    return Error{path.string(), "", "no such lengths file"};
  } else if (is_json_lines(path)) {
    reader.read_json_lines(path);
  } else {
    reader.read_text(path);
  }
  return reader.finish(path);
}

}  // namespace cpbench
