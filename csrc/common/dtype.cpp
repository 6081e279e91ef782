#include "../backend.hpp"

namespace unishmem {

const char* dtype_name(DType t) {
  static const char* names[] = {"float16", "bfloat16", "float32", "float64", "int8", "int16",
                                "int32", "int64", "uint8", "uint16", "uint32", "uint64"};
  const int i = int(t);
  return i >= 0 && i < 12 ? names[i] : "unknown dtype";
}

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::i8: case DType::u8: return 1;
    case DType::f16: case DType::bf16: case DType::i16: case DType::u16: return 2;
    case DType::f32: case DType::i32: case DType::u32: return 4;
    case DType::f64: case DType::i64: case DType::u64: return 8;
  }
  return 0;
}

}  // namespace unishmem
