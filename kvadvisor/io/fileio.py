"""The file boundary: inputs checked before opening; outputs written whole, never over an input.

Inputs must be regular files (or directories where a command reads one): a FIFO, a device or
a socket would block or never end, so they are refused before anything opens them. Outputs
go to a temporary file beside the target and are renamed over it only when complete; a device
or FIFO named as the output is written to directly instead (a rename would replace the device
node with a regular file). No output may be an input of the same command, however it is
spelled (another path, a symlink or a hard link: files are compared by device and inode).
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from kvadvisor.errors import ConfigError, KvAdvisorError, TraceNotFoundError

# Names for the kinds of file that are neither a regular file nor a directory.
_SPECIAL_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
# Files in an input directory compared against outputs: enough for any real rules folder or
# partitioned trace; a larger tree is compared by its first files only.
MAX_DIRECTORY_FILES = 100_000
# Object-store URI schemes a trace may be read from, and the filesystem each names
# (kvadvisor.trace.location opens them); anything else is a local path.
URI_SCHEMES = {"s3": "s3", "gs": "gs", "gcs": "gs", "az": "az"}


def is_uri(text: object) -> bool:
    """Whether a trace argument is a URI (``scheme://...``) rather than a local path."""
    head, sep, _ = str(text).partition("://")
    return bool(sep) and head.isascii() and head.isalnum()


def special_kind(mode: int) -> str | None:
    """What a file of this ``st_mode`` is when it is neither regular nor a directory."""
    return next((name for test, name in _SPECIAL_KINDS if test(mode)), None)


def _utf8_name(path: Path) -> bool:
    """Whether the path can be encoded as UTF-8 (pyarrow opens files by UTF-8 name only)."""
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _stat_problem(path: Path, exc: OSError) -> str:
    """Why ``os.stat(path)`` failed, in words."""
    if exc.errno == errno.ELOOP:
        return "is a symlink loop (a link that leads back to itself); point it at a file"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "cannot be read (permission denied); check the file's permissions"
    if exc.errno == errno.ENAMETOOLONG:
        return "the name is too long"
    if exc.errno == errno.ENOTDIR:
        return "no such file (a part of the path is not a directory)"
    if exc.errno == errno.ENOENT and os.path.islink(path):
        return f"is a symlink to a missing file ({os.readlink(path)})"
    if exc.errno == errno.ENOENT:
        return "no such file"
    return f"cannot be read ({exc.strerror or exc})"


def check_input(
    path: str | Path,
    error: type[KvAdvisorError],
    *,
    directory_ok: bool = False,
    what: str = "file",
) -> Path:
    """``path`` as a Path once it is known to be a readable regular file (or a directory).

    Raises ``error`` with one line naming the path (for a missing trace, TraceNotFoundError:
    a FileNotFoundError too): missing, a symlink loop, a directory
    (unless ``directory_ok``), a FIFO, device or socket, or unreadable. Nothing is read: a
    regular file is opened and closed to prove it can be read (opening one never blocks).
    """
    path = Path(path)
    if not _utf8_name(path):
        raise error(f"{path}: the file name is not UTF-8 text, which the readers need; rename it")
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        message = f"{path}: {_stat_problem(path, exc)}"
        if exc.errno in (errno.ENOENT, errno.ENOTDIR) and issubclass(TraceNotFoundError, error):
            # A missing trace is a FileNotFoundError for Python callers (still one CLI line).
            raise TraceNotFoundError(message, os.fspath(path)) from None
        raise error(message) from None
    if stat.S_ISDIR(mode):
        if directory_ok:
            return path
        raise error(f"{path}: is a directory; give a {what}")
    kind = special_kind(mode)
    if kind is not None:
        raise error(
            f"{path}: is {kind}, not a regular file; kvadvisor reads its inputs from files "
            "(save the data to a file first)"
        )
    try:
        os.close(os.open(path, os.O_RDONLY))
    except OSError as exc:
        raise error(f"{path}: {_stat_problem(path, exc)}") from None
    return path


@dataclass(frozen=True)
class InputFile:
    """One input of a command: what it is (for messages) and where."""

    role: str  # "trace", "plan", "rules file", "catalog", "model config"
    path: Path


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of what ``path`` names after symlinks, or None when it does not exist."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _files_under(path: Path) -> Iterator[Path]:
    """``path`` itself, or the regular files under it when it is a directory."""
    if not path.is_dir():
        yield path
        return
    count = 0
    for root, _, names in os.walk(path):
        for name in names:
            yield Path(root) / name
            count += 1
            if count >= MAX_DIRECTORY_FILES:
                return


class InputSet:
    """The inputs of one command, to refuse any output that would write over one of them."""

    def __init__(self, inputs: Iterable[InputFile] = ()) -> None:
        self._by_identity: dict[tuple[int, int], InputFile] = {}
        for item in inputs:
            for file in _files_under(item.path):
                ident = _identity(file)
                if ident is not None:
                    self._by_identity.setdefault(ident, InputFile(item.role, file))

    def check_output(self, target: str | Path, option: str = "-o") -> None:
        """Raise ConfigError when ``target`` is one of the inputs or cannot be written.

        An input under any spelling or link; unwritable by :func:`check_writable`. Called
        before the work, so a bad output is found before minutes of analysis, not after.
        """
        if str(target) == "-":
            return
        check_writable(target, option)
        ident = _identity(Path(target))
        found = self._by_identity.get(ident) if ident is not None else None
        if found is not None:
            same = "" if str(found.path) == str(target) else f" ({found.path})"
            raise ConfigError(
                f"{option} {target}: is the input {found.role}{same}; kvadvisor never writes "
                "over its input: choose another output path"
            )


def _name_max(folder: Path) -> int:
    """The longest file name the file system of ``folder`` takes (255 where it cannot say)."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def check_writable(target: str | Path, option: str = "-o", *, directory: bool = False) -> None:
    """Raise ConfigError when ``target`` cannot be written, before any work is done.

    Checked without writing anything: a name too long for the file system (each part, and the
    whole path), a part of the path that is a file, a folder that cannot be written to, and an
    existing device or FIFO the user may not write. ``directory``: ``target`` is a folder
    to create or fill (verify's -o), else a file. What only writing can tell (a full disk)
    is still an error then, and leaves nothing behind.
    """
    path = Path(os.path.abspath(target))
    fix = f"choose another {option}"
    encoded = os.fsencode(path)
    if len(encoded) >= getattr(os, "PATH_MAX", 4096):
        raise ConfigError(f"{option} {target}: the path is too long ({len(encoded)} bytes); {fix}")
    # The nearest existing folder: the parts below it are created, so each must fit its name.
    existing = path
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    limit = _name_max(existing if existing.is_dir() else existing.parent)
    for part in path.relative_to(existing).parts or (path.name,):
        if len(os.fsencode(part)) > limit:
            raise ConfigError(
                f"{option} {target}: the name is too long ({len(os.fsencode(part))} bytes; the "
                f"file system takes {limit}); {fix}"
            )
    if existing == path:
        kind = _existing_special(path)
        if kind is not None:
            if not os.access(path, os.W_OK):
                raise ConfigError(f"{option} {target}: is {kind} you may not write; {fix}")
            return
        if path.is_dir() and not directory:
            raise ConfigError(f"{option} {target}: is a directory; give an output file name")
        if not directory or not path.is_dir():
            existing = path.parent
    if not existing.is_dir():
        raise ConfigError(f"{option} {target}: {existing} is not a directory; {fix}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{option} {target}: cannot write in {existing} (permission denied); {fix}"
        )


# Temporary output files not yet renamed into place or removed: what a hard stop (a second
# signal, or a first one whose exception a library swallowed) removes before it exits.
_LIVE: set[str] = set()
_LIVE_LOCK = threading.Lock()


def _register(tmp: str) -> None:
    with _LIVE_LOCK:
        _LIVE.add(tmp)


def _unregister(tmp: str) -> None:
    with _LIVE_LOCK:
        _LIVE.discard(tmp)


def remove_temporary_files() -> None:
    """Remove every temporary output file still being written (safe from any thread)."""
    with _LIVE_LOCK:
        for tmp in list(_LIVE):
            Path(tmp).unlink(missing_ok=True)
        _LIVE.clear()


def _new_temporary(real: Path) -> str:
    """Create an empty temporary file beside ``real``, registered before it exists.

    Registered first, so that whatever stops the run from here on (a signal's exception,
    wherever it lands) finds the name in :func:`remove_temporary_files`.
    """
    for _ in range(100):
        tmp = str(real.parent / f".{real.name}.{secrets.token_hex(4)}.tmp")
        _register(tmp)
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            _unregister(tmp)
            continue
        except OSError:
            _unregister(tmp)
            raise
        return tmp
    raise FileExistsError(errno.EEXIST, "no free temporary file name", str(real.parent))


def _umask_mode() -> int:
    """The mode a new file gets under the process umask (mkstemp alone would give 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _existing_special(path: Path) -> str | None:
    """The kind of an existing non-regular, non-directory file at ``path`` (None otherwise)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return special_kind(mode)


@contextmanager
def atomic_target(path: str | Path, fix: str = "choose another output path") -> Iterator[Path]:
    """Yield the path to write ``path``'s content to; on success it is in place, else nothing.

    A regular (or new) file: a temporary file beside it, renamed over it when the body
    finishes, removed when it fails (an error, Ctrl-C, SIGTERM). A symlink is followed, so the
    file it points to is replaced and the link kept. A FIFO or character device (``/dev/null``,
    ``/dev/stdout``, a pipe) is yielded itself, to be written in place: renaming a file over
    it would replace the device. The parent directory is created; a new file gets the
    permissions a plain ``open`` would. An OS error while creating, writing or renaming (a
    parent that is a file, no permission, a full disk or ``/dev/full``) is a ConfigError
    naming ``path`` and ``fix``: the body of the ``with`` must only write the output.
    """
    path = Path(path)
    if not _utf8_name(path):
        raise ConfigError(f"{path}: the file name is not UTF-8 text; {fix}")
    kind = _existing_special(path)
    if kind is not None:
        if kind == "a socket":
            raise ConfigError(f"{path}: is a socket, which cannot be written as a file; {fix}")
        try:
            yield path
        except OSError as exc:
            raise _unwritable(path, exc, fix) from None
        return
    real = Path(os.path.realpath(path))
    if real.is_dir():
        raise ConfigError(f"{path}: is a directory; give an output file name")
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        tmp = _new_temporary(real)
    except OSError as exc:
        raise _unwritable(path, exc, fix) from None
    try:
        yield Path(tmp)
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, real)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _unwritable(path, exc, fix) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        _unregister(tmp)


@contextmanager
def output_stream(path: str | Path, fix: str = "choose another output path") -> Iterator[BinaryIO]:
    """An open binary file whose content becomes ``path``: :func:`atomic_target`'s rules.

    Give this to a writer that takes a file object, never the path: pyarrow deletes the path
    it was given when a write fails, which for a device named as the output (``/dev/full``,
    a ``mknod`` node) deletes the device node. Only the temporary file kvadvisor created is
    ever removed.
    """
    with atomic_target(path, fix) as target, open(target, "wb") as fh:
        yield fh


def write_text(path: str | Path, text: str, fix: str = "choose another output path") -> None:
    """Write ``text`` (UTF-8) to ``path`` whole: atomically, or in place for a device or FIFO."""
    with atomic_target(path, fix) as target:
        # "replace": a lone surrogate (a file name that is not UTF-8) becomes U+FFFD, so
        # the output stays valid UTF-8 instead of failing to encode.
        with open(target, "w", encoding="utf-8", errors="replace") as fh:
            fh.write(text)


def _unwritable(path: Path, exc: OSError, fix: str) -> ConfigError:
    return ConfigError(f"{path}: cannot be written ({exc.strerror or exc}); {fix}")


def write_parquet_batches(path: str | Path, batches: Iterable[object], empty: object) -> int:
    """Write pyarrow RecordBatches to ``path`` as one parquet file, a batch at a time; rows.

    The file is whole or absent (:func:`output_stream`); ``empty`` (a pyarrow schema) is the
    file's schema when there is no batch.
    """
    import pyarrow.parquet as pq

    rows = 0
    with output_stream(path) as fh:
        writer = None
        try:
            for batch in batches:
                if writer is None:
                    writer = pq.ParquetWriter(fh, batch.schema)  # type: ignore[attr-defined]
                writer.write_batch(batch)
                rows += batch.num_rows  # type: ignore[attr-defined]
            if writer is None:
                writer = pq.ParquetWriter(fh, empty)
        finally:
            if writer is not None:
                writer.close()
    return rows
