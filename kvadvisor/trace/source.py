"""A trace file's fingerprint: the sha256 the report echoes, so a reader can tell traces apart."""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK_BYTES = 1 << 20


def file_sha256(path: str | Path) -> str | None:
    """sha256 (hex) of a trace file, read in 1 MiB chunks; None for a directory of files."""
    path = Path(path)
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()
