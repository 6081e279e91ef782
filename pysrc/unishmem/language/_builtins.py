"""The device table's rows (NOTE [device table]) as Triton builtins, one module global each, so
that @triton.jit code (the dispatchers and Triton implementations of _triton_impl.py) can call
them as `_builtins.<name>`. unishmem.language re-exports them, except that a row some vendor
implements in Triton is replaced there by its dispatcher (NOTE [triton rows])."""
from ._build import atomic_function, device_function, uses_triton  # noqa: F401
from ._table import ATOMICS, ROWS

globals().update({row.name: device_function(row) for row in ROWS})
globals().update({name: atomic_function(name) for name in ATOMICS})
