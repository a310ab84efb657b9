// lengths_file.h — a user's own sequence lengths, read from the files their data pipeline writes:
// one length per line, a CSV with a header naming the column, JSON lines with a token-count field
// (or a token array), or a folder of JSON-lines files.
// Requires: core/common/expected.h. Used by empirical length profiles ("lengths_file") and by
// `cpbench compare`. Every error names the file and the line.
// Note: the lengths are kept in file order (files of a folder by name), with where each came from,
// so that a profile can replay them as given and an overlong one is reported at its line.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/common/expected.h"

namespace cpbench {

// Longest sequence a lengths file may hold: far above every context length in use (2^30 tokens).
inline constexpr int64_t kMaxLengthTokens = int64_t{1} << 30;

// Column (CSV) or field (JSON lines) names taken as a token count when none is given, in this
// order of preference.
const std::vector<std::string>& known_length_columns();

struct LengthsFile {
  std::vector<int64_t> lengths;        // tokens, in file order
  std::vector<std::string> files;      // the files read, in order (one unless a folder was given)
  std::vector<uint32_t> file_of;       // per length: index into files
  std::vector<uint64_t> line_of;       // per length: 1-based line in that file
  std::string column;                  // the column or field read ("" for one value per line)

  // "path:line" of length i.
  std::string where(size_t i) const;
};

// Reads `path`: a folder (every *.jsonl / *.ndjson file in it, by name), a *.jsonl / *.ndjson file
// (JSON lines: one object per line, the length in `column` or the first known field present — a
// number, or an array of tokens whose size is the length), or anything else as text: one value per
// line, or comma-separated with a header line naming the columns (`column`, else the only column,
// else the first known name). '#' comments and blank lines are skipped. Every length must be an
// integer in [1, kMaxLengthTokens]; an empty file, a wrong value or a missing column is an error
// naming the file, the line and what was expected.
Expected<LengthsFile> read_lengths_file(const std::filesystem::path& path, const std::string& column = "");

}  // namespace cpbench
