"""Progress of the studies' long work (serving compiles, the scheduler, explore's points).

On a terminal or in Jupyter: a rich progress bar (transient).  Otherwise (output
piped to a file, a CI log, a batch job): plain lines on stderr -- one when a
stage starts, one at most every `PLAIN_EVERY_S` seconds while it runs, and one
when it ends, each "pimjax <stage>: i/n (s s)" -- never the blank lines a
bar leaves where it cannot redraw.
"""
from __future__ import annotations

import sys
import time

PLAIN_EVERY_S = 10.0


def _rich_ok(stream) -> bool:
    from rich.console import Console
    c = Console(file=stream)
    return bool(c.is_terminal or c.is_jupyter)


class Bar:
    """One stage's progress: `advance(n)` as work finishes, `close()` at the end."""

    def __init__(self, description: str, total: int, on: bool = True, stream=None):
        self.description, self.total, self.on = description, int(total), on
        self.stream = stream if stream is not None else sys.stderr
        self.done, self.t0, self._last = 0, time.perf_counter(), time.perf_counter()
        self._rich = None
        if not on:
            return
        if _rich_ok(self.stream):
            from rich.progress import Progress
            self._rich = Progress(transient=True)
            self._rich.start()
            self._task = self._rich.add_task(description, total=self.total)
        else:
            self._line("start")

    def _line(self, what: str) -> None:
        el = time.perf_counter() - self.t0
        print(f"pimjax {self.description}: {self.done}/{self.total} {what} ({el:.0f} s)", file=self.stream,
              flush=True)

    def advance(self, n: int = 1) -> None:
        self.done += n
        if not self.on:
            return
        if self._rich is not None:
            self._rich.update(self._task, advance=n)
        elif time.perf_counter() - self._last >= PLAIN_EVERY_S:
            self._last = time.perf_counter()
            self._line("")

    def close(self) -> None:
        if not self.on:
            return
        if self._rich is not None:
            self._rich.stop()
        else:
            self._line("done")
        self.on = False


def track(items, total: int, description: str, on: bool = True, stream=None):
    """Iterate `items` with a `Bar` (rich or plain lines, as the module says)."""
    if not on:
        yield from items
        return
    bar = Bar(description, total, True, stream)
    try:
        for x in items:
            yield x
            bar.advance()
    finally:
        bar.close()
