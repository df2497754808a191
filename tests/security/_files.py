"""Helpers of the hostile-input tests: fingerprints of files and folders, to prove nothing changed."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def digest(path: Path) -> str:
    """The SHA-256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (links not followed) by relative path: its SHA-256, or ``-> target``."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            rel = str(path.relative_to(folder))
            if path.is_symlink():
                out[rel] = f"-> {os.readlink(path)}"
            elif path.is_file():
                out[rel] = digest(path)
    return out
