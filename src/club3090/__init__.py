"""club3090: will this Hugging Face model run on my GPUs under vLLM, and how to launch it."""

from club3090.version import __version__

__all__ = ["__version__"]
