"""One job in a child forked from the worker: it takes the job's stdio, folder, environment and
threads, runs the script Snakemake wrote as ``python script`` would, and exits with its code."""

from __future__ import annotations

import atexit
import ctypes
import os
import runpy
import signal
import sys
import traceback
from collections.abc import Mapping, Sequence
from typing import NoReturn

from presdep.runtime.torch_threads import limit_torch_threads

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15


def _job_name(script: str) -> bytes:
    """What ps and top show for the job: Snakemake names its script file tmpXXXX.<script>.py."""
    parts = os.path.basename(script).split(".")
    return ("job " + (parts[-2] if len(parts) >= 3 else parts[0])).encode()[:15]


def run_job(script: str, cwd: str, env: Mapping[str, str], stdio: Sequence[int]) -> NoReturn:
    """Never returns: the child ends with the script's exit code (1 on an exception, as Python's),
    or, as Python does for an uncaught KeyboardInterrupt, killed by SIGINT."""
    code: int | None = 1  # None: die by SIGINT
    try:
        _become_the_job(script, cwd, env, stdio)
        sys.argv = [script]
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # what `python script` puts first
        code = _run(script)
    except BaseException:  # a failure to set the job up is the job's failure, on its own stderr
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()  # what the interpreter runs at exit (tqdm, logging, ...)
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
            if code is None:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGINT)
                code = 128 + signal.SIGINT  # what a shell reports, should the signal not end us
            os._exit(code)


def _become_the_job(script: str, cwd: str, env: Mapping[str, str], stdio: Sequence[int]) -> None:
    # Its own process group, so a cancel reaches whatever the job starts; killed if the worker dies.
    os.setpgid(0, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    libc.prctl(_PR_SET_NAME, _job_name(script), 0, 0, 0)
    if os.getppid() == 1:  # the worker died before the line above took effect
        os._exit(137)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler)
    for target, fd in zip((0, 1, 2), stdio):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    _threads_as_a_fresh_process(env)


def _threads_as_a_fresh_process(env: Mapping[str, str]) -> None:
    """A fresh job reads its thread counts from the variables Snakemake sets when torch and OpenBLAS
    load; here they loaded in the worker (single-threaded), so set the counts the job would have."""
    omp = env.get("OMP_NUM_THREADS")
    if "torch" in sys.modules and omp and omp.isdigit():
        limit_torch_threads(int(omp))
    blas = env.get("OPENBLAS_NUM_THREADS")
    if "numpy" in sys.modules and blas and blas.isdigit() and int(blas) > 1:
        from threadpoolctl import threadpool_limits

        threadpool_limits(int(blas), user_api="blas")


def _run(script: str) -> int | None:
    """The script's exit code; None when an uncaught KeyboardInterrupt ended it."""
    try:
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as stop:
        if stop.code is None:
            return 0
        if isinstance(stop.code, int):
            return stop.code
        print(stop.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a SIGINT the job did not handle: Python prints it, then dies by it
        traceback.print_exc()
        return None
    except BaseException:
        traceback.print_exc()
        return 1
