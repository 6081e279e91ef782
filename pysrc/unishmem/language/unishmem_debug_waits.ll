@unishmem_wait_table = addrspace(1) externally_initialized global i64 0, align 8

define i64 @unishmem_wait_table_address() {
  %v = load i64, ptr addrspace(1) @unishmem_wait_table, align 8
  ret i64 %v
}
