"""A cache directory for the compiled kernels wherever kvadvisor runs, even with no HOME.

The kernels are compiled by numba with ``cache=True``, which looks for a writable directory
when each kernel is defined: ``NUMBA_CACHE_DIR``, the ``__pycache__`` beside the module, then
``~/.cache/numba``. In a container running as ``nobody`` (an installed package, an unwritable
HOME) none is writable, and numba refuses to define the kernel ("cannot cache function ...:
no locator available"). Before any kernel is defined, :func:`ensure_cache_dir` checks that
one of them is writable; when none is, it points numba at a new temporary directory (removed
at exit), so the kernels compile and run, only without a cache kept between runs.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

# Set when the temporary directory is in use: the one-line note the CLI shows.
NOTE: str | None = None
_DIRECTORY: str | None = None


def remove_directory() -> None:
    """Remove the temporary cache directory, if one was made (also run at exit)."""
    if _DIRECTORY is not None:
        shutil.rmtree(_DIRECTORY, ignore_errors=True)


def _writable(directory: Path) -> bool:
    """Whether numba could keep its cache in ``directory`` (its own test: create, write)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()
    except OSError:
        return False
    return True


def _candidates() -> list[Path]:
    """The directories numba would try, in its order (NUMBA_CACHE_DIR, in-tree, user-wide)."""
    found = []
    if os.environ.get("NUMBA_CACHE_DIR"):
        found.append(Path(os.environ["NUMBA_CACHE_DIR"]))
    found.append(Path(__file__).resolve().parent / "__pycache__")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    if not base.startswith("~"):  # no HOME and no passwd entry: no user-wide directory
        found.append(Path(base) / "numba")
    return found


def ensure_cache_dir() -> str | None:
    """Make sure numba has a writable cache directory; the note to show when it had none.

    Called once, before any module that defines a kernel is imported (from the package's
    ``__init__``). Cheap when a directory is writable: a file created and removed.
    """
    global NOTE, _DIRECTORY
    if NOTE is not None or any(_writable(d) for d in _candidates()):
        return NOTE
    try:
        directory = tempfile.mkdtemp(prefix="kvadvisor-numba-")
    except OSError:
        return None  # no writable temporary directory either: numba says what it can
    _DIRECTORY = directory
    atexit.register(remove_directory)
    os.environ["NUMBA_CACHE_DIR"] = directory
    numba = sys.modules.get("numba")
    if numba is not None:  # imported already (by the caller): its config was read at import
        numba.config.CACHE_DIR = directory
    NOTE = (
        "note: no writable cache directory for compiled kernels (HOME and the install are "
        f"read-only); compiling into {directory}, removed at exit. Set NUMBA_CACHE_DIR to a "
        "writable directory to keep them between runs"
    )
    return NOTE
