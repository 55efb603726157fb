"""A run the user stopped (Ctrl-C is SIGINT; ``kill`` sends SIGTERM) is no crash: its jobs end with
one line saying so and how to carry on, instead of a rule error or "the worker died"."""

from __future__ import annotations

import functools
import os
import signal
import threading

USER_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_STOP_LINE = "stopped by the user ({signal}); resume with `make resume`"


def stop_line(signal_name: str | None) -> str:
    """The line that reports the stop, naming the signal where it is known."""
    return _STOP_LINE.format(signal=signal_name or "SIGINT/SIGTERM")


def user_signal_of(exit_code: int) -> str | None:
    """The signal's name when a process ended by SIGINT or SIGTERM (exit code -2 or -15)."""
    if exit_code < 0 and -exit_code in USER_SIGNALS:
        return signal.Signals(-exit_code).name
    return None


class JobStopped(RuntimeError):
    """A job ended by a stop, not by its own failure: the worker or the child was stopped by a
    signal (``signal_name``), or the run stopped the worker (``signal_name`` None)."""

    def __init__(self, signal_name: str | None, pid: int | None = None):
        self.signal_name = signal_name
        if signal_name is None:
            text = f"the run was cancelled while job {pid} ran (the job was stopped with the worker)"
        else:
            text = stop_line(signal_name)
        super().__init__(text)


class StoppedByUser(KeyboardInterrupt):
    """A job ended because the user stopped the whole run. Snakemake's local executor takes a
    KeyboardInterrupt from a job as part of its own stop and reports no rule error for it."""


class SignalRecord:
    """Notes which user signal this process received first, then hands the signal on to the
    handler that was in place (Snakemake's), so its behaviour is unchanged."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._installed = False

    def install(self) -> None:
        """Put the note in front of the current handlers; only the main thread may, and only once."""
        if self._installed or threading.current_thread() is not threading.main_thread():
            return
        for sig in USER_SIGNALS:
            previous = signal.getsignal(sig)
            if previous != signal.SIG_IGN:  # an ignored signal stops nothing, so it is no stop to note
                signal.signal(sig, functools.partial(self._note, previous))
        self._installed = True

    def _note(self, previous, signum, frame) -> None:
        if self.received is None:
            self.received = signal.Signals(signum).name
        if callable(previous):
            previous(signum, frame)
        else:  # the default action: end as if no handler had been here
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
