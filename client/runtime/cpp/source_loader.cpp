// A DataLoader whose bytes come from the Rust side (a sealed file decrypted as it is read, for
// one), and a Module over it: the runtime asks for each segment when it needs it, so no
// plaintext copy of the program or its data file exists on disk and none whole in memory.
//
// Rust owns the sources; the Module (and its loaders) must be destroyed before them
// (client/runtime/src/executorch/source.rs keeps that order).

#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include <executorch/extension/module/module.h>
#include <executorch/runtime/core/data_loader.h>
#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/freeable_buffer.h>
#include <executorch/runtime/core/result.h>

extern "C" {
// Fills `out` with `size` bytes of the source at `offset`; 0 on success.
int ferry_source_read(const void* source, size_t offset, size_t size, void* out);
}

namespace {

using executorch::runtime::DataLoader;
using executorch::runtime::Error;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::Result;

// Segments are handed out 64-byte aligned, as the mmap and file loaders do at least.
constexpr size_t kAlignment = 64;

void free_segment(void* /*context*/, void* data, size_t /*size*/) { std::free(data); }

class SourceLoader final : public DataLoader {
 public:
  SourceLoader(const void* source, size_t length) : source_(source), length_(length) {}

  Result<FreeableBuffer> load(size_t offset, size_t size, const SegmentInfo& /*info*/)
      const override {
    if (offset > length_ || size > length_ - offset) {
      return Error::InvalidArgument;
    }
    if (size == 0) {
      return FreeableBuffer(nullptr, 0, nullptr);
    }
    size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
    void* data = std::aligned_alloc(kAlignment, rounded);
    if (data == nullptr) {
      return Error::MemoryAllocationFailed;
    }
    if (ferry_source_read(source_, offset, size, data) != 0) {
      std::free(data);
      return Error::AccessFailed;
    }
    return FreeableBuffer(data, size, free_segment);
  }

  Error load_into(size_t offset, size_t size, const SegmentInfo& /*info*/, void* buffer)
      const override {
    if (offset > length_ || size > length_ - offset) {
      return Error::InvalidArgument;
    }
    if (size == 0) {
      return Error::Ok;
    }
    return ferry_source_read(source_, offset, size, buffer) == 0 ? Error::Ok
                                                                 : Error::AccessFailed;
  }

  Result<size_t> size() const override { return length_; }

 private:
  const void* source_;
  size_t length_;
};

}  // namespace

extern "C" {

// A new Module reading the program from `program` and, when `data` is not null, its named
// data (a .ptd) from `data`. Null when it cannot be made.
void* ferry_source_module_new(const void* program, size_t program_len, const void* data,
                              size_t data_len) {
  try {
    std::unique_ptr<DataLoader> data_loader;
    if (data != nullptr) {
      data_loader = std::make_unique<SourceLoader>(data, data_len);
    }
    return new executorch::extension::Module(
        std::make_unique<SourceLoader>(program, program_len), nullptr, nullptr, nullptr,
        std::move(data_loader));
  } catch (...) {
    return nullptr;
  }
}

}  // extern "C"
