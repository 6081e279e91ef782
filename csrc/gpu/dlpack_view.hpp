// A non-owning DLPack capsule over device memory, so that Python wraps the
// symmetric heap as a torch tensor (torch.from_dlpack) without linking libtorch.
// The structs follow the DLPack ABI (v0.x "dltensor" capsules, which every
// framework still accepts); only what a 1-D byte buffer needs is declared.
#pragma once

#include <Python.h>

#include <cstdint>

namespace unishmem::gpu {

namespace dl {
struct Device {
  std::int32_t device_type;  // 2 = CUDA, 10 = ROCm
  std::int32_t device_id;
};
struct DataType {
  std::uint8_t code;  // 1 = unsigned int
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct Tensor {
  void* data;
  Device device;
  std::int32_t ndim;
  DataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;
  std::uint64_t byte_offset;
};
struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor*);
};
}  // namespace dl

namespace detail {
struct ByteView {
  dl::ManagedTensor managed;
  std::int64_t shape[1];
};
inline void delete_view(dl::ManagedTensor* m) { delete static_cast<ByteView*>(m->manager_ctx); }
inline void capsule_destructor(PyObject* capsule) {
  // Still named "dltensor": nobody consumed it, so it is ours to delete.
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* m = static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (m && m->deleter) m->deleter(m);
  }
}
}  // namespace detail

// New reference to a capsule describing `bytes` bytes at `data` on device `device_id`.
// The memory is not owned: it lives as long as the runtime's heap.
inline PyObject* dlpack_bytes(void* data, std::size_t bytes, int device_type, int device_id) {
  auto* v = new detail::ByteView{};
  v->shape[0] = static_cast<std::int64_t>(bytes);
  v->managed.dl_tensor = dl::Tensor{data, dl::Device{device_type, device_id}, 1, dl::DataType{1, 8, 1}, v->shape,
                                    nullptr, 0};
  v->managed.manager_ctx = v;
  v->managed.deleter = detail::delete_view;
  PyObject* capsule = PyCapsule_New(&v->managed, "dltensor", detail::capsule_destructor);
  if (!capsule) delete v;
  return capsule;
}

}  // namespace unishmem::gpu
