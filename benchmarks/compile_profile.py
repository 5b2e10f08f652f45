"""Where a cold compile goes: process CPU numba spends compiling each kernel, per signature.

Usage: NUMBA_CACHE_DIR=$(mktemp -d) python benchmarks/compile_profile.py analyze TRACE --quiet

Runs a kvadvisor command (the arguments after the script's name) in this process with a
listener on numba's compile events, then prints the process CPU, and per compiled function
(kernels and the numba library functions they use) the signatures compiled and the CPU spent
in its compile outside those of the functions it called ("self") and with them ("with
callees"). An empty ``NUMBA_CACHE_DIR`` makes every kernel compile; with a filled one only
what is missing compiles.
"""

from __future__ import annotations

import collections
import sys
import time

from numba.core import event


class Timer(event.Listener):
    """Records (process CPU, event) at the start and end of each compile."""

    def __init__(self) -> None:
        self.records: list[tuple[float, event.Event]] = []

    def on_start(self, ev: event.Event) -> None:
        """A compile starts (nested in its caller's, when a kernel calls one)."""
        self.records.append((time.process_time(), ev))

    def on_end(self, ev: event.Event) -> None:
        """A compile ends."""
        self.records.append((time.process_time(), ev))


def main() -> None:
    """Run the command under the listener and print the table, largest self CPU first."""
    timer = Timer()
    event.register("numba:compile", timer)
    from kvadvisor.cli import main as cli

    sys.argv = ["kvadvisor", *sys.argv[1:]]
    try:
        cli()
    except SystemExit:
        pass
    total = time.process_time()
    own: dict[str, float] = collections.defaultdict(float)
    whole: dict[str, float] = collections.defaultdict(float)
    signatures: collections.Counter[str] = collections.Counter()
    stack: list[list] = []  # [name, start, CPU of nested compiles]
    for at, ev in timer.records:
        func = ev.data["dispatcher"].py_func
        name = f"{func.__module__.rsplit('.', 1)[-1]}.{func.__name__}"
        if ev.is_start:
            stack.append([name, at, 0.0])
            continue
        name, start, nested = stack.pop()
        own[name] += at - start - nested
        whole[name] += at - start
        signatures[name] += 1
        if stack:
            stack[-1][2] += at - start
    print(
        f"process CPU {total:.1f} s; compiling {sum(own.values()):.1f} s: "
        f"{len(signatures)} functions, {sum(signatures.values())} signatures"
    )
    print("  self s  with callees s  signatures  function")
    for name in sorted(own, key=own.__getitem__, reverse=True):
        print(f"{own[name]:8.2f}  {whole[name]:14.2f}  {signatures[name]:10d}  {name}")


if __name__ == "__main__":
    main()
