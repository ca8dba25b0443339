"""The stand-in's low-level binding: no shared library (system queries answer None)."""

_lib = None
