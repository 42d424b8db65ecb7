"""The package version, in a module of its own so pure code can name it without importing the API."""

__version__ = "0.1.0"
