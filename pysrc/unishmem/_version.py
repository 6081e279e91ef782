"""The package's version: pyproject.toml's [project] version is the only place it is written."""

import importlib.metadata

__version__: str = importlib.metadata.version("unishmem")
