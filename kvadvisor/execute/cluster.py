"""Replays on Dask: a local cluster of processes, or an existing scheduler ([distributed]).

Providers run at once in threads of this process; each replay they ask for runs on a worker,
and only what the search reads of it comes back (:meth:`DaskExecutor.submit_kept`). Those
replays are calls on one :class:`Runner` actor per worker, fed from one queue here by one
thread per worker, so a worker runs one replay at a time and the next waiting one goes to
whichever worker frees first: a Dask task costs about 8 ms of CPU between this process
(client and scheduler) and the worker, an actor call about 2.5 ms (docs/benchmarks.md 5d),
and a replay of the search about 40 ms. The whole result stays in its runner until a verdict
fetches it or nothing here holds it. Each worker keeps its own numba
cache directory: numba writes a kernel's cache index without a lock, so two processes saving
different signatures of one kernel at once can leave an index that points one signature at the
other's machine code (tests/conftest.py says the same of pytest-xdist). A local worker's
directory is seeded with the kernels this process already compiled, so it loads instead of
compiling them again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import queue
import re
import shutil
import sys
import tempfile
import threading
import uuid
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, TypeVar

import cloudpickle
import dask
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin

from kvadvisor.errors import ConfigError
from kvadvisor.execute import EXTRA, Executor, Kept

T = TypeVar("T")
R = TypeVar("R")

# Seconds to reach a scheduler, and for an existing cluster to show its first worker.
CONNECT_TIMEOUT_S = 10
# A local cluster's housekeeping, slowed: with Dask's defaults an idle worker spent 2.7% of a
# core and the analysing process (scheduler and client) 3.5%, with these 0.25% and 0.6%
# (measured over 20 s on the shared 2-core machine). The profiles and system figures feed only
# a dashboard, which a local cluster here does not serve; memory is still checked every second.
QUIET = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.worker.memory.monitor-interval": "1s",
}
# The package's own in-tree cache (numba's default place for the kernels beside it).
PACKAGE = Path(__file__).resolve().parents[1]


class Shared:
    """A value :meth:`DaskExecutor.share` sends once to each worker that runs a task reading it."""

    def __init__(self, token: str) -> None:
        self.token = token


class Runner:
    """One per worker (a Dask actor): runs the kept tasks and holds what they keep.

    ``shared``: the values tasks read (:class:`Shared`), sent with the first task that needs
    them on this worker; ``kept``: each task's whole result, until fetched or dropped.
    """

    def __init__(self) -> None:
        self.shared: dict[str, Any] = {}
        self.kept: dict[str, Any] = {}

    def run_kept(
        self,
        token: str,
        fn: Callable[..., Any],
        reduce: Callable[[Any], Any],
        args: tuple[Any, ...],
        send: dict[str, bytes],
        drop: list[str],
    ) -> Any:
        """``reduce(fn(*args))``, keeping ``fn``'s result as ``token`` (after the drops)."""
        for gone in drop:  # what nothing in the analysing process holds any more
            self.kept.pop(gone, None)
            self.shared.pop(gone, None)
        for key, blob in send.items():
            self.shared[key] = pickle.loads(blob)
        whole = fn(*(self.shared[a.token] if isinstance(a, Shared) else a for a in args))
        self.kept[token] = whole
        return reduce(whole)

    def take(self, token: str) -> Any:
        """A kept result, handed over (it is held where it was asked for from now on)."""
        return self.kept.pop(token)


_Job = tuple[str, Callable[..., Any], Callable[[Any], Any], tuple[Any, ...], Future[Any]]


class DaskExecutor(Executor):
    """Providers in threads here, replays on the cluster's workers (one :class:`Runner` each)."""

    parallel = True

    def __init__(self, client: Client, cluster: LocalCluster | None = None) -> None:
        self.client = client
        self.cluster = cluster
        self.workers = len(client.scheduler_info()["workers"])
        self._lock = threading.Lock()
        self._runners: list[Any] = []  # started with the first kept task
        self._actors: list[Any] = []  # the runners' futures: the actors live while held
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._blobs: dict[str, bytes] = {}  # shared values, pickled once
        self._sent: list[set[str]] = []  # per runner: the shared values it holds
        self._drops: list[list[str]] = []  # per runner: what to forget with its next task
        self._where: dict[str, int] = {}  # a kept result's runner
        self._orphans: set[str] = set()  # kept results let go before their task ended
        # Handles dropped here (finalizers run in any thread, so they only queue the token).
        self._released: queue.SimpleQueue[tuple[str, Future[Any] | None]] = queue.SimpleQueue()

    def fan_out(
        self,
        fn: Callable[[T], R],
        items: Iterable[T],
        announce: Callable[[int, T], None] | None = None,
    ) -> list[R]:
        """``fn`` of every item at once (one thread each), in the items' order.

        ``announce(i, item)`` as the i-th call finishes (from this thread: listeners need not
        be thread-safe).
        """
        todo = list(items)
        out: list[Any] = [None] * len(todo)
        with ThreadPoolExecutor(max_workers=max(1, len(todo))) as pool:
            running = {pool.submit(fn, item): i for i, item in enumerate(todo)}
            for n, future in enumerate(as_completed(running), 1):
                i = running[future]
                out[i] = future.result()
                if announce is not None:
                    announce(n, todo[i])
        return out

    def share(self, value: Any) -> Any:
        """A handle on ``value`` (pickled now, as Dask would) for :meth:`submit_kept`'s calls.

        Each worker receives it with its first task that reads it and keeps it until the
        handle is dropped here.
        """
        token = uuid.uuid4().hex
        blob = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            self._blobs[token] = blob
        handle = Shared(token)
        weakref.finalize(handle, self._unshare, token)
        return handle

    def submit(self, fn: Callable[..., R], *args: Any) -> Any:
        """``fn(*args)`` as a task on a worker (never deduplicated by Dask: callers do)."""
        return self.client.submit(fn, *args, pure=False)

    def submit_kept(self, fn: Callable[..., R], reduce: Callable[[R], Any], *args: Any) -> Any:
        """``fn(*args)`` on the first worker free; only ``reduce`` of its result comes back.

        The future of ``reduce(result)`` and a :class:`Kept` handle whose first read fetches
        the whole result from its worker; a result never read is forgotten there when its
        handle is dropped here.
        """
        self._start()
        token = uuid.uuid4().hex
        done: Future[Any] = Future()
        self._jobs.put((token, fn, reduce, args, done))
        kept = Kept(lambda: self._take(token, done))
        weakref.finalize(kept, self._unkeep, token, done)
        return done, kept

    def _start(self) -> None:
        """The runners and their feeding threads, once."""
        with self._lock:
            if self._runners:
                return
            addresses = sorted(self.client.scheduler_info()["workers"])
            with self.client.as_current():  # an actor's handle binds to the current client
                self._actors = [
                    self.client.submit(
                        Runner, workers=[a], allow_other_workers=False, actor=True, pure=False
                    )
                    for a in addresses
                ]
                runners = [f.result() for f in self._actors]
            self._sent = [set() for _ in runners]
            self._drops = [[] for _ in runners]
            for i, runner in enumerate(runners):
                thread = threading.Thread(
                    target=self._feed, args=(i, runner), name=f"kvadvisor-runner-{i}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
            self._runners = runners

    def _feed(self, i: int, runner: Any) -> None:
        """Hand runner ``i`` the next waiting job each time it is free."""
        while (job := self._jobs.get()) is not None:
            token, fn, reduce, args, done = job
            if not done.set_running_or_notify_cancel():
                continue
            with self._lock:
                self._settle()
                need = [
                    a.token for a in args if isinstance(a, Shared) and a.token not in self._sent[i]
                ]
                send = {t: self._blobs[t] for t in need}
                self._sent[i].update(need)
                drop, self._drops[i] = self._drops[i], []
            try:
                small = runner.run_kept(token, fn, reduce, args, send, drop).result()
            except BaseException as exc:  # the caller's .result() raises it
                done.set_exception(exc)
                continue
            with self._lock:
                self._settle()
                if token in self._orphans:
                    self._orphans.discard(token)
                    self._drops[i].append(token)
                else:
                    self._where[token] = i
            done.set_result(small)

    def _take(self, token: str, done: Future[Any]) -> Any:
        """A kept result, from the runner that holds it (its task's error, if it failed)."""
        done.result()
        with self._lock:
            i = self._where.pop(token)
        return self._runners[i].take(token).result()

    def _unshare(self, token: str) -> None:
        """The handle on shared value ``token`` was dropped (a finalizer: takes no lock)."""
        self._released.put((token, None))

    def _unkeep(self, token: str, done: Future[Any]) -> None:
        """The handle on kept result ``token`` was dropped (a finalizer: takes no lock)."""
        self._released.put((token, done))

    def _settle(self) -> None:
        """What was released, to be dropped by its workers with their next task (lock held)."""
        while True:
            try:
                token, done = self._released.get_nowait()
            except queue.Empty:
                return
            if done is None:  # a shared value
                self._blobs.pop(token, None)
                for i, sent in enumerate(self._sent):
                    if token in sent:
                        sent.discard(token)
                        self._drops[i].append(token)
            elif token in self._where:
                self._drops[self._where.pop(token)].append(token)
            elif not done.done():
                self._orphans.add(token)  # still running: dropped as soon as it ends

    def close(self) -> None:
        """Disconnect; a local cluster's processes end with it."""
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()
        self._threads = []
        self._runners = []
        self._actors = []
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


class NumbaCacheDir(WorkerPlugin):
    """Points each worker process at its own numba cache directory, before any kernel exists.

    ``base``: the folder holding one directory per worker (None: the worker's own
    NUMBA_CACHE_DIR, else the installed package's ``__pycache__``, else a temporary one).
    ``seed``: (folder, numba's subpath for it) pairs of compiled kernels to copy in first.
    """

    def __init__(self, base: str | None, seed: tuple[tuple[str, str], ...] = ()) -> None:
        self.base = base
        self.seed = seed

    def setup(self, worker: Any) -> None:
        """Choose, seed and set the directory (numba reads it when a kernel is defined)."""
        directory = worker_cache_dir(self.base, str(worker.name))
        for source, subpath in self.seed:
            seed_kernels(Path(source), Path(directory) / subpath)
        os.environ["NUMBA_CACHE_DIR"] = directory
        numba = sys.modules.get("numba")
        if numba is not None:  # its config was read at import
            numba.config.CACHE_DIR = directory


def _writable(directory: Path) -> bool:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()
    except OSError:
        return False
    return True


def worker_cache_dir(base: str | None, name: str) -> str:
    """The cache directory of the worker called ``name`` (made; stable across runs)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80]
    roots = [base] if base else [os.environ.get("NUMBA_CACHE_DIR"), str(PACKAGE / "__pycache__")]
    for root in roots:
        if root and _writable(Path(root) / f"numba-dask-{safe}"):
            return str(Path(root) / f"numba-dask-{safe}")
    return tempfile.mkdtemp(prefix=f"kvadvisor-numba-dask-{safe}-")


def seed_kernels(source: Path, target: Path) -> None:
    """Copy compiled kernels (data files first, then their indexes) into ``target``."""
    if not source.is_dir():
        return
    target.mkdir(parents=True, exist_ok=True)
    for pattern in ("*.nbc", "*.nbi"):  # an index never names data that is not there yet
        for f in sorted(source.glob(pattern)):
            shutil.copyfile(f, target / f.name)


def local_seed() -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """This process's numba cache: the base for local workers' directories, and the seed.

    With NUMBA_CACHE_DIR its subfolders copy as they are; numba's in-tree cache (a
    ``__pycache__`` beside each module) copies under the subpath numba gives that module's
    folder inside a NUMBA_CACHE_DIR (the folder's name and the SHA-1 of its absolute path).
    """
    own = os.environ.get("NUMBA_CACHE_DIR")
    if own:
        root = Path(own)
        subs = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        return own, tuple((str(p), p.name) for p in subs if any(p.glob("*.nbi")))
    pairs = []
    for cache in sorted(PACKAGE.rglob("__pycache__")):
        if any(cache.glob("*.nbi")):
            folder = os.path.abspath(cache.parent)
            digest = hashlib.sha1(folder.encode()).hexdigest()
            pairs.append((str(cache), f"{os.path.basename(folder)}_{digest}"))
    base = PACKAGE / "__pycache__"
    return (str(base) if _writable(base) else None), tuple(pairs)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def local(workers: int) -> DaskExecutor:
    """A cluster of ``workers`` processes on this machine (one thread each), ready to run."""
    base, seed = local_seed()
    try:
        with dask.config.set(QUIET):  # read as the scheduler and the workers start
            cluster = LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
    except (OSError, RuntimeError) as exc:
        raise ConfigError(
            f"--workers {workers}: cannot start a local Dask cluster: {_first_line(exc)}"
        ) from None
    # Actor calls straight to the workers, not relayed by the scheduler (also in this process):
    # 15% less CPU here a call on the shared 2-core machine (local workers are always reachable).
    client = Client(cluster, set_as_default=False, direct_to_workers=True)
    try:
        client.register_plugin(NumbaCacheDir(base, seed), name="kvadvisor-numba-cache")
    except Exception:
        client.close()
        cluster.close()
        raise
    return DaskExecutor(client, cluster)


def _worker_version() -> str:
    """The kvadvisor version a worker runs (run on each worker)."""
    from kvadvisor import __version__

    return __version__


def connect(address: str) -> DaskExecutor:
    """The existing cluster whose scheduler listens at ``address`` (e.g. tcp://host:8786).

    Its workers must run this kvadvisor (the replays' figures are the code's): checked here.
    """
    from kvadvisor import __version__

    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        raise ConfigError(
            f"--scheduler {address}: cannot reach the Dask scheduler: {_first_line(exc)}"
        ) from None
    try:
        try:
            client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
        except TimeoutError:
            raise ConfigError(
                f"--scheduler {address}: the scheduler has no workers (none joined within "
                f"{CONNECT_TIMEOUT_S} s)"
            ) from None
        try:
            client.register_plugin(NumbaCacheDir(None), name="kvadvisor-numba-cache")
            versions = set(client.run(_worker_version).values())
        except Exception as exc:  # whatever a worker raised, remotely: said in one line
            raise ConfigError(
                f"--scheduler {address}: the workers cannot run kvadvisor "
                f"({_first_line(exc)}); install kvadvisor {__version__} with '{EXTRA}' on them"
            ) from None
        if versions != {__version__}:
            raise ConfigError(
                f"--scheduler {address}: the workers run kvadvisor "
                f"{', '.join(sorted(versions))}, this is {__version__}: the figures would differ"
            )
    except BaseException:
        client.close()
        raise
    return DaskExecutor(client)
