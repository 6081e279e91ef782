"""The device functions that every vendor provides itself (an extern call compiled, a host backend
primitive interpreted), generated from _table.py: what the Triton implementations (_triton_impl.py)
are written over. language/__init__.py adds the rows written in Triton on some vendor."""

from ._build import device_function, implemented_in_triton
from ._table import ROWS

globals().update({row.name: device_function(row) for row in ROWS if not implemented_in_triton(row)})
