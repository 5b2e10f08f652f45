"""Atomic output files: write beside the target, then rename, so no half-written file is left."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kvadvisor.errors import ConfigError


def _umask_mode() -> int:
    """The mode a new file gets under the process umask (mkstemp alone would give 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def atomic_target(path: str | Path, fix: str = "choose another output path") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, else vanishes.

    The parent directory is created; the file gets the permissions a plain ``open`` would.
    An OS error while creating, writing or renaming it (a parent that is a file, no
    permission, a full disk) is a ConfigError naming ``path`` and ``fix``: the body of the
    ``with`` must only write the output.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
    except OSError as exc:
        raise _unwritable(path, exc, fix) from None
    try:
        yield Path(tmp)
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _unwritable(path, exc, fix) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _unwritable(path: Path, exc: OSError, fix: str) -> ConfigError:
    return ConfigError(f"{path}: cannot be written ({exc.strerror or exc}); {fix}")
