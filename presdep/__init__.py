"""presdep: measure and reduce presentation dependence in batched LLM scoring."""

__version__ = "0.1.0"
