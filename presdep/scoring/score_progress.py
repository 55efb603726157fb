"""A score job's progress bar: prompts done of total, tokens read, the rate and the time left."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Self, TypeVar

from tqdm.auto import tqdm

from presdep.runtime import logs

# The bar is drawn this many times per progress line: a job's log and console get one line
# every presdep.runtime.logs.PROGRESS_EVERY_S seconds (ProgressStream keeps one draw per
# interval), and a terminal sees the bar move in between.
PROGRESS_DRAWS_PER_LINE = 10
T = TypeVar("T")


class Progress:
    """A score job's bar in prompts done of total, with the tokens read, the rate and the time left.

    Drawn at most and (by a heartbeat thread, while a batch is read, the weights load or
    another job's read is awaited) at least every ``PROGRESS_EVERY_S / PROGRESS_DRAWS_PER_LINE``
    seconds, so that :class:`presdep.runtime.logs.ProgressStream` writes a line every
    ``PROGRESS_EVERY_S`` (30 s): the first when the bar opens, in the log at once and on the
    console once the job has run that long. A query's prompts move the bar by at most its
    own count (a scorer's noise re-reads hold companions too), topped up when it is done.
    """

    def __init__(self, total: int, initial: int, desc: str):
        self._every = max(float(logs.PROGRESS_EVERY_S) / PROGRESS_DRAWS_PER_LINE, 0.001)
        self._lock = threading.Lock()
        self.tokens = 0
        self._t0 = time.perf_counter()
        self._left = 0  # of the current query's prompts, not reported yet
        self.bar = tqdm(total=total, initial=initial, desc=desc, unit="prompt", mininterval=self._every,
                        miniters=1, postfix=self._postfix())
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="score progress", daemon=True)
        self._beat.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> bool:
        self._stop.set()
        self._beat.join()
        with self._lock:
            self.bar.set_postfix_str(self._postfix(), refresh=False)
            self.bar.close()
        return False

    def _postfix(self) -> str:
        elapsed = time.perf_counter() - self._t0
        rate = self.tokens / elapsed if elapsed > 0 else 0.0
        return f"{self.tokens:,} tokens, {rate:,.0f} tok/s"

    def start_query(self, prompts: int) -> None:
        self._left = prompts

    def add(self, prompts: int, tokens: int = 0) -> None:
        """``prompts`` done (read, or answered without a read) and ``tokens`` read by the model."""
        with self._lock:
            self.tokens += tokens
            step = min(prompts, self._left)
            self._left -= step
            self.bar.set_postfix_str(self._postfix(), refresh=False)
            self.bar.update(step)

    def end_query(self) -> None:
        if self._left:
            self.add(self._left)

    def _heartbeat(self) -> None:
        beat = 0.0  # when this thread last drew the bar (tqdm's last_print_t says when update() did)
        while not self._stop.wait(self._every):
            with self._lock:
                now = self.bar._time()
                if now - max(self.bar.last_print_t, beat) < self._every:
                    continue
                # Not in the middle of a log record the main thread is writing to the same stream.
                handlers = logging.getLogger().handlers
                for h in handlers:
                    h.acquire()
                try:
                    self.bar.set_postfix_str(self._postfix(), refresh=False)
                    self.bar.refresh()  # the same counts and rate, a later elapsed time
                finally:
                    for h in reversed(handlers):
                        h.release()
                beat = now


def read_with_progress(scorer: Any, total: int, desc: str, read: Callable[[], T], progress: bool) -> T:
    """``read()`` (every prompt of a program's job in one scorer call) under one bar of ``total``
    prompts, fed by the scorer's ``on_progress`` hook where it has one."""
    if not progress:
        return read()
    hook = hasattr(scorer, "on_progress")
    with Progress(total, 0, desc) as bar:
        bar.start_query(total)
        if hook:
            scorer.on_progress = bar.add
        try:
            out = read()
        finally:
            if hook:
                scorer.on_progress = None
        bar.end_query()
    return out


__all__ = ["PROGRESS_DRAWS_PER_LINE", "Progress", "read_with_progress"]
