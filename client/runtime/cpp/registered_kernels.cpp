// Lists the operators (kernels) the linked ExecuTorch runtime registered, for ferry-client's
// `executorch` feature (the Rust bindings do not expose the kernel registry). A kernel is
// registered once per dtype/dim-order key, so a name may repeat; the Rust side deduplicates.
#include <cstddef>
#include <cstring>

#include <executorch/runtime/kernel/operator_registry.h>

extern "C" size_t ferry_et_num_registered_kernels() {
  return executorch::runtime::get_registered_kernels().size();
}

// Copies the operator name of kernel `index` (`namespace::name.overload`) into `out`
// (NUL-terminated, truncated to `cap`). Returns the name's length, or -1 when the index is
// out of range or the kernel has no name.
extern "C" long ferry_et_registered_kernel_name(size_t index, char* out, size_t cap) {
  auto kernels = executorch::runtime::get_registered_kernels();
  if (index >= kernels.size() || cap == 0 || kernels[index].name_ == nullptr) {
    return -1;
  }
  const char* s = kernels[index].name_;
  size_t n = std::strlen(s);
  size_t m = n < cap - 1 ? n : cap - 1;
  std::memcpy(out, s, m);
  out[m] = '\0';
  return static_cast<long>(n);
}
