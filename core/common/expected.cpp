#include "core/common/expected.h"

namespace cpbench {

std::string Error::str() const {
  std::string s;
  if (!file.empty()) s += file + ": ";
  if (!pointer.empty()) s += pointer + ": ";
  return s + message;
}

std::string Errors::str() const {
  std::string s;
  for (size_t i = 0; i < list.size(); ++i) {
    if (i) s += '\n';
    s += list[i].str();
  }
  return s;
}

}  // namespace cpbench
