"""club3090: will this Hugging Face model run on my GPUs under vLLM, and how to launch it."""

__version__ = "0.1.0"

__all__ = ["__version__"]
