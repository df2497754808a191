"""Persistence: memory-mapped folders (``memmap.py``); the format is described in README.md."""
