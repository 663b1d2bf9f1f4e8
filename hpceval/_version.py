"""The package version, in a module of its own: reading it imports nothing else of hpceval."""

__version__ = "0.1.0"
