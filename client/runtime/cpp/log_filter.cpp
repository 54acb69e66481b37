// Filters the linked ExecuTorch runtime's log by level before it reaches stderr: the runtime
// logs at Info level on every first load (CPU probing, for example), which apps and ferry's
// own commands do not want on their stderr. Installed through the runtime's platform layer.
#include <atomic>
#include <cstddef>
#include <cstdio>

#include <executorch/runtime/platform/platform.h>

namespace {

// 0 debug, 1 info, 2 error, 3 fatal; messages below it are dropped. 4 drops everything.
std::atomic<int> min_rank{2};

int rank_of(et_pal_log_level_t level) {
  switch (level) {
    case kDebug:
      return 0;
    case kInfo:
      return 1;
    case kFatal:
      return 3;
    default:
      return 2;
  }
}

void emit(et_timestamp_t, et_pal_log_level_t level, const char* filename, const char*,
          size_t line, const char* message, size_t length) {
  if (rank_of(level) < min_rank.load(std::memory_order_relaxed)) {
    return;
  }
  std::fprintf(stderr, "%c executorch:%s:%zu] %.*s\n", static_cast<char>(level),
               filename != nullptr ? filename : "", line, static_cast<int>(length),
               message != nullptr ? message : "");
}

}  // namespace

// Sets the lowest level that is printed (see min_rank) and installs the filter the first time.
// Returns 0, or -1 when the runtime refused the platform layer.
extern "C" int ferry_et_set_log_level(int rank) {
  min_rank.store(rank, std::memory_order_relaxed);
  static const bool installed = executorch::runtime::register_pal(
      executorch::runtime::PalImpl::create(emit, __FILE__));
  return installed ? 0 : -1;
}
