"""The prompt-sensitivity benchmark (see :mod:`presdep.bench.core` for the Python API)."""
