"""Command line: each command turns options into one library call and maps errors to exit codes.

One module per command group; ``commands`` imports them all, which registers their commands on
``app``. This package itself loads none of them until ``app`` is used, so ``kvadvisor
--version`` answers without importing the command-line library.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from kvadvisor import __version__
from kvadvisor.lazy import lazy_exports

if TYPE_CHECKING:
    from kvadvisor.cli.commands import app
    from kvadvisor.cli.common import EXIT_FINDINGS, EXIT_OK, EXIT_USER_ERROR

_EXPORTS = {
    "app": "kvadvisor.cli.commands",
    "EXIT_FINDINGS": "kvadvisor.cli.common",
    "EXIT_OK": "kvadvisor.cli.common",
    "EXIT_USER_ERROR": "kvadvisor.cli.common",
}

__all__ = ["EXIT_FINDINGS", "EXIT_OK", "EXIT_USER_ERROR", "app", "main"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

# Exit codes for a run stopped by a signal: 128 + the signal number, as a shell reports it.
# SIGHUP (the terminal closed, a session ended) is handled as SIGTERM, exit code included.
EXIT_SIGINT = 128 + signal.SIGINT
EXIT_SIGTERM = 128 + signal.SIGTERM
_HUP = getattr(signal, "SIGHUP", None)  # POSIX only
STOP_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, _HUP) if s is not None)
_DEFAULT_HANDLERS = {
    s: signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL for s in STOP_SIGNALS
}
# Cyclic garbage collection during a run: it allocates millions of objects it keeps (modules,
# catalogs, the report's dataclasses) and makes little cyclic garbage, so Python's defaults
# (700, 10, 10) scan the kept objects hundreds of times: about 0.35 s of CPU (6%) of an
# analyze of Mooncake x50 (whole-process A/B, five runs each, peak memory unchanged).
# Collections still run: the youngest generation's about 140 times less often.
GC_THRESHOLDS = (100_000, 50, 100)
# Seconds a run has, after SIGINT or SIGTERM, to unwind through its clean-ups before it is
# stopped outright: the exception a signal raises can be swallowed by library code it lands
# in (an import inside numpy, a C extension's callback), or wait behind a long native call.
GRACE_S = 5.0
_stopping: list[int] = []


class Interrupted(BaseException):
    """Raised in the main thread by SIGINT or SIGTERM, to unwind the run.

    It goes through every ``finally`` and ``with`` (so temporary output files are removed)
    like Ctrl-C does, but is not a KeyboardInterrupt, which the parser would turn into its
    own "Aborted!".
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop_message(signum: int) -> str:
    name = signal.Signals(signum).name
    return f"error: interrupted by {name}; no output was left half-written"


def _stop_now(signum: int) -> None:
    """Remove the temporary files and exit at once (from any thread)."""
    from kvadvisor import jitcache
    from kvadvisor.cli.common import error_line
    from kvadvisor.io.fileio import remove_temporary_files

    remove_temporary_files()
    jitcache.remove_directory()
    error_line(_stop_message(signum))
    os._exit(_exit_code(signum))


def _exit_code(signum: int) -> int:
    return EXIT_SIGINT if signum == signal.SIGINT else EXIT_SIGTERM


def _on_late_signal(signum: int, frame: object) -> None:
    """A signal once the command has returned: its output is whole; exit with its code now.

    Raising in the interpreter's shutdown (joining threads, flushing) would print "Exception
    ignored in threading._shutdown"; the default action would end the process unannounced.
    """
    _stop_now(signum)


def _on_signal(signum: int, frame: object) -> None:
    if _stopping:  # a second signal: the user wants out now
        _stop_now(_stopping[0])
    _stopping.append(signum)
    watchdog = threading.Timer(GRACE_S, _stop_now, args=(signum,))
    watchdog.daemon = True
    try:
        watchdog.start()
    except RuntimeError:  # no thread to be had (a low memory limit): unwind without it
        pass
    raise Interrupted(signum)


def _on_unraisable(info: Any) -> None:
    """An Interrupted that Python could not raise where the signal landed: stop at once.

    A signal handled while the interpreter runs a callback it cannot propagate from (the
    import system's module-lock weakref callback, a ``__del__``) would print "Exception
    ignored in ..." with a traceback and go on until the watchdog: seen once in a test of
    SIGTERM during `synth`'s imports.
    """
    if isinstance(info.exc_value, Interrupted):
        _stop_now(info.exc_value.signum)
    sys.__unraisablehook__(info)


def main() -> None:
    """Console-script entry point: exits with the command's code.

    The parser's own errors (an option out of range, an unknown option or command, a missing
    argument) would print a usage block and a boxed message; they become one ``error:`` line
    naming the command's --help, exit 2, like every other user error. SIGINT and SIGTERM stop
    the run with one line and exit 130 or 143 (SIGHUP as SIGTERM), temporary files removed,
    up to the process's last instruction. The garbage collector
    runs at :data:`GC_THRESHOLDS` meanwhile.
    """
    if sys.argv[1:] == ["--version"]:
        # The most common probe of an install: answered before typer and the commands load.
        sys.stdout.write(f"kvadvisor {__version__}\n")
        sys.exit(0)
    limit_threads_under_memory_cap()
    previous = {sig: signal.signal(sig, _on_signal) for sig in STOP_SIGNALS}
    previous_hook, sys.unraisablehook = sys.unraisablehook, _on_unraisable
    previous_gc = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        code = _run()
    except Interrupted as stop:
        from kvadvisor.cli.common import error_line
        from kvadvisor.io.fileio import remove_temporary_files

        remove_temporary_files()  # any the unwinding did not reach
        error_line(_stop_message(stop.signum))
        sys.exit(_exit_code(stop.signum))
    finally:
        # A caller in the same process (a test, an embedding tool) gets its own handlers back,
        # and its collector's thresholds. Where they were Python's defaults (the console
        # script), a signal from here to the process's end exits with its code at once.
        for sig, handler in previous.items():
            late = handler is _DEFAULT_HANDLERS[sig] or handler is None
            signal.signal(sig, _on_late_signal if late else handler)
        gc.set_threshold(*previous_gc)
        sys.unraisablehook = previous_hook
    sys.exit(code)


def _memory_capped() -> bool:
    import resource

    return resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY


def _from_the_compiler(exc: BaseException) -> bool:
    """Whether an import or load failure came from numba, llvmlite or a kernel module."""
    if "llvmlite" in str(exc) or "numba" in str(exc):
        return True
    if isinstance(exc, ImportError) and (exc.name or "").startswith("kvadvisor"):
        return True
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if "llvmlite" in name or "numba" in name:
            return True
        tb = tb.tb_next
    return False


def _peak_bytes() -> int | None:
    """The process's peak address space in bytes (Linux), to say how far the run got."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) * 1024  # the kernel counts kB
    except (OSError, ValueError):
        pass
    return None


def out_of_memory(what: str) -> str:
    """The one line for a run that ran out of memory: what it needed, how far it got, the limit.

    numpy's MemoryError names the allocation ("Unable to allocate 8.00 MiB ..."), pyarrow's
    its size; a bare one names nothing, so the peak address space reached is given too.
    """
    import resource

    from kvadvisor.units import Unit, format_value

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    limit = (
        f" under the address-space limit of {format_value(soft, Unit.BYTES)} (ulimit -v)"
        if soft != resource.RLIM_INFINITY
        else ""
    )
    need = " ".join(what.split()) or "an allocation failed"
    peak = _peak_bytes()
    reached = f", with {format_value(peak, Unit.BYTES)} of address space in use" if peak else ""
    return (
        f"error: out of memory{limit}: {need}{reached}; raise the limit, or give a smaller "
        "trace (analyze: a lower --memory-limit streams it) (see `kvadvisor docs errors#memory`)"
    )


def limit_threads_under_memory_cap() -> None:
    """Under an address-space limit, start fewer and smaller threads.

    Each thread reserves its stack and (glibc) a 64 MiB malloc arena of address space, and
    OpenBLAS starts one per core when numpy loads: under `ulimit -v 2000000` that alone
    aborted runs in glibc or in OpenBLAS before any work. Only where a limit is set, so an
    unlimited run keeps its parallelism.
    """
    if not _memory_capped():
        return
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")
    threading.stack_size(4 << 20)
    try:
        import ctypes

        m_arena_max = -8  # glibc malloc.h
        ctypes.CDLL("libc.so.6").mallopt(m_arena_max, 2)
    except (OSError, AttributeError):
        pass  # not glibc: its allocator has its own policy


def _run() -> int:
    """Run the command line; its exit code (parser errors and a failing stdout included)."""
    from kvadvisor import firstuse, jitcache
    from kvadvisor.cli.commands import app
    from kvadvisor.cli.common import EXIT_OK, EXIT_USER_ERROR, error_line, silence_stdout
    from kvadvisor.cli.progress import Progress

    if jitcache.NOTE:
        error_line(jitcache.NOTE)
    # A first run's one-time costs (kernel compilation, the font cache) are said, on a terminal.
    # Only on a terminal: a pipe's reader compares what a run prints, not what it cost once.
    notes = Progress(quiet=not sys.stderr.isatty())
    firstuse.listen(lambda what: notes.note(f"kvadvisor: first run: {what}"))

    try:
        code = app(standalone_mode=False, prog_name="kvadvisor")
    except MemoryError as exc:  # numpy's and pyarrow's allocation failures are MemoryErrors
        error_line(out_of_memory(str(exc)))
        return EXIT_USER_ERROR
    except RuntimeError as exc:
        if "can't start new thread" not in str(exc):
            raise
        error_line(out_of_memory("a worker thread's stack could not be allocated"))
        return EXIT_USER_ERROR
    except (OSError, ImportError) as exc:
        # Under an address-space limit, mapping LLVM's library (numba's compiler) fails as an
        # OSError from llvmlite, and a kernel module half-imported by it as an ImportError.
        if not (_memory_capped() and _from_the_compiler(exc)):
            raise
        error_line(out_of_memory("the kernel compiler (numba's LLVM) could not be loaded"))
        return EXIT_USER_ERROR
    except Exception as exc:
        # Duck-typed: Click's exceptions live in typer._click or click, by typer version.
        if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":
            # A bare `kvadvisor` or `kvadvisor rules` asks what there is: the help (which rich
            # has printed already; plain Click hands it over as the message) is the answer.
            if exc.format_message():
                sys.stdout.write(exc.format_message() + "\n")
            return EXIT_OK
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else "kvadvisor"
        error_line(f"error: {exc.format_message()} (see `{where} --help`)")
        return exc.exit_code
    except BaseException as exc:
        if type(exc).__name__ != "Abort":  # end of input at a prompt
            raise
        error_line("Aborted!")
        return 1
    try:
        sys.stdout.flush()  # what the commands wrote is flushed as they write; this is the rest
    except OSError as exc:
        silence_stdout()
        error_line(f"error: stdout: cannot be written ({exc.strerror or exc})")
        return EXIT_USER_ERROR
    return code if isinstance(code, int) else EXIT_OK
