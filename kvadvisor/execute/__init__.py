"""Where the deployment search runs: in this process (the default) or on a Dask cluster.

The search hands its providers to :meth:`Executor.fan_out` and its replays to
:meth:`Executor.submit_kept` (what the search reads of a replay comes back; the whole replay is
kept where it ran and fetched once, by :class:`Kept`, only where a verdict reads it); the serial
executor runs them here, one after another, exactly as a plain loop would. :func:`open_executor`
gives the serial one for one worker and no scheduler, without importing Dask; otherwise a
:class:`kvadvisor.execute.cluster.DaskExecutor` on a local cluster of processes or on an
existing scheduler (docs/scale.md, "Running on a Dask cluster").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future
from threading import Lock
from typing import Any, TypeVar

from kvadvisor.errors import ConfigError

T = TypeVar("T")
R = TypeVar("R")

# What to install for --workers/--scheduler (pyproject's optional extra).
EXTRA = "kvadvisor[distributed]"


class Kept:
    """A result kept where it was computed: fetched on the first :meth:`get`, then held here.

    ``fetch`` returns the result (or raises the error that computing it raised).
    """

    _UNSET = object()

    def __init__(self, fetch: Callable[[], Any]) -> None:
        self._fetch: Callable[[], Any] | None = fetch
        self._value: Any = Kept._UNSET
        self._lock = Lock()  # two threads asking at once fetch it once

    def get(self) -> Any:
        """The result (fetched once; the executor may then free its copy)."""
        with self._lock:
            if self._value is Kept._UNSET:
                assert self._fetch is not None
                self._value = self._fetch()
                self._fetch = None  # a cluster frees a result nobody holds
            return self._value


class Executor:
    """The serial executor: every provider and replay in this process, in order."""

    workers = 1
    parallel = False  # True: replays run elsewhere, and fan_out's calls run at once

    def fan_out(
        self,
        fn: Callable[[T], R],
        items: Iterable[T],
        announce: Callable[[int, T], None] | None = None,
    ) -> list[R]:
        """``fn`` of each item, in the items' order; ``announce(i, item)`` before each one.

        A parallel executor runs the calls at once and announces each as it finishes.
        """
        out = []
        for i, item in enumerate(items, 1):
            if announce is not None:
                announce(i, item)
            out.append(fn(item))
        return out

    def share(self, value: Any) -> Any:
        """A handle on ``value`` that :meth:`submit` passes to every call (here: the value)."""
        return value

    def submit(self, fn: Callable[..., R], *args: Any) -> Future:
        """Run ``fn(*args)``; the future of its result (here: done before it returns)."""
        done: Future = Future()
        try:
            done.set_result(fn(*args))
        except Exception as exc:  # the caller's .result() raises it, as a pool's would
            done.set_exception(exc)
        return done

    def submit_kept(
        self, fn: Callable[..., R], reduce: Callable[[R], Any], *args: Any
    ) -> tuple[Future[Any], Kept]:
        """Run ``fn(*args)`` and keep its result where it ran.

        The future of ``reduce(result)`` (all that comes back) and a :class:`Kept` handle on the
        whole result. Here: both done before it returns (an exception raises from .result()).
        """
        whole = self.submit(fn, *args)
        if whole.exception() is not None:
            return whole, Kept(whole.result)
        return self.submit(reduce, whole.result()), Kept(whole.result)

    def close(self) -> None:
        """Release what the executor holds (here: nothing)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


SERIAL = Executor()


def open_executor(workers: int = 1, scheduler: str | None = None) -> Executor:
    """The executor for ``--workers``/``--scheduler``: serial for one worker and no scheduler.

    Raises ConfigError (one line) when Dask is missing, the options conflict, or the
    scheduler cannot be reached.
    """
    if workers < 1:
        raise ConfigError(f"--workers {workers}: give at least 1 (1: this process alone)")
    if scheduler is None and workers == 1:
        return SERIAL
    if scheduler is not None and workers != 1:
        raise ConfigError(
            "--workers and --scheduler: give one (an existing cluster has its own workers)"
        )
    flag = f"--scheduler {scheduler}" if scheduler is not None else f"--workers {workers}"
    try:
        from kvadvisor.execute import cluster
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in ("dask", "distributed"):
            raise
        raise ConfigError(
            f"{flag} runs on Dask, which is not installed: pip install '{EXTRA}'"
        ) from None
    if scheduler is not None:
        return cluster.connect(scheduler)
    return cluster.local(workers)
