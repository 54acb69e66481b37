// Lists the backends the linked ExecuTorch runtime registered, for ferry-client's
// `executorch` feature (the Rust bindings do not expose the registry).
#include <cstddef>
#include <cstring>

#include <executorch/runtime/backend/interface.h>

extern "C" size_t ferry_et_num_registered_backends() {
  return executorch::runtime::get_num_registered_backends();
}

// Copies the name of backend `index` into `out` (NUL-terminated, truncated to `cap`).
// Returns the name's length, or -1 when the index is out of range.
extern "C" long ferry_et_registered_backend_name(size_t index, char* out, size_t cap) {
  auto name = executorch::runtime::get_backend_name(index);
  if (!name.ok() || cap == 0) {
    return -1;
  }
  const char* s = name.get();
  size_t n = std::strlen(s);
  size_t m = n < cap - 1 ? n : cap - 1;
  std::memcpy(out, s, m);
  out[m] = '\0';
  return static_cast<long>(n);
}
