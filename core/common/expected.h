// expected.h — errors as values: Error (file, JSON pointer, message) and Expected<T>.
// Requires: nothing. Library code never exits or throws for bad input; it returns an Error
// and the CLI turns it into a message and exit code 2 (STYLE.md, practice 9).
// Note: C++20 has no std::expected (C++23); this is the minimal subset cpbench needs.
#pragma once

#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace cpbench {

struct Error {
  std::string file;     // the input file the problem is in ("" when not file-related)
  std::string pointer;  // RFC 6901 JSON pointer inside that file ("" for the whole document)
  std::string message;  // what was expected, or what went wrong

  // "file: /pointer: message", leaving out the parts that are empty.
  std::string str() const;
};

// Several errors found in one pass (all unknown keys of a spec, say), reported together.
struct Errors {
  std::vector<Error> list;
  std::string str() const;  // one error per line
};

template <class T>
class Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}          // NOLINT: implicit by design
  Expected(Error error) : v_(Errors{{std::move(error)}}) {}  // NOLINT
  Expected(Errors errors) : v_(std::move(errors)) {}   // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& operator*() { return std::get<0>(v_); }
  const T& operator*() const { return std::get<0>(v_); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  const Errors& errors() const { return std::get<1>(v_); }
  std::string error_str() const { return errors().str(); }

 private:
  std::variant<T, Errors> v_;
};

struct Unit {};
using Status = Expected<Unit>;
inline Status ok_status() { return Unit{}; }

}  // namespace cpbench
