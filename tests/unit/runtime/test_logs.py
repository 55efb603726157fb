"""Job logs: tqdm bars become throttled whole lines in the log and on the console."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap

from tqdm import tqdm

from presdep.runtime.logs import ProgressStream


class FakeClock:
    """Time advanced by the test, so that throttling is checked without sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_tqdm_through_stream_gives_throttled_lines():
    log, console, clock = io.StringIO(), io.StringIO(), FakeClock()
    stream = ProgressStream(log, console, "score/bm25/dl19", every=30.0, clock=clock)
    stream.write("plain message\n")
    # 10 items, 10 s each: with a 30 s interval, lines at t = 0 (the bar's first
    # draw), 30, 60, 90 and the final state on close.
    with tqdm(total=10, desc="score dl19", unit="query", file=stream, mininterval=0, miniters=1,
              ascii=True, ncols=80) as bar:
        for _ in range(10):
            clock.now += 10.0
            bar.update(1)
    text = log.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert lines[0] == "plain message"
    progress = lines[1:]
    assert all(line.startswith("score dl19:") for line in progress), progress
    # which item of how many: the first draw, every third update and the last one
    counts = [line.split("|")[-1].split()[0] for line in progress]
    assert counts[0] == "0/10" and counts[-1] == "10/10"
    assert 3 <= len(progress) <= 6, progress
    assert "query/s" in progress[-1] or "s/query" in progress[-1]
    # the console gets the same progress lines, labelled, once the job has run 30 s
    # (so not the first draw at t = 0), and never the plain message
    shown = console.getvalue().splitlines()
    assert shown == [f"[score/bm25/dl19] {line}" for line in progress[1:]]


def test_a_short_job_stays_quiet_on_the_console():
    log, console, clock = io.StringIO(), io.StringIO(), FakeClock()
    stream = ProgressStream(log, console, "x", every=30.0, clock=clock)
    for i in range(1, 6):
        clock.now += 1.0
        stream.write(f"\rbar {i}/5")
    stream.write("\n")
    assert log.getvalue().splitlines() == ["bar 1/5", "bar 5/5"]
    assert console.getvalue() == ""


def test_no_lines_without_time_passing_except_first_and_last():
    log, clock = io.StringIO(), FakeClock()
    stream = ProgressStream(log, None, "x", every=30.0, clock=clock)
    for i in range(1, 101):
        stream.write(f"\rbar {i}/100")
    stream.write("\n")
    assert log.getvalue().splitlines() == ["bar 1/100", "bar 100/100"]


def test_a_log_record_written_mid_bar_keeps_its_own_line():
    log, clock = io.StringIO(), FakeClock()
    stream = ProgressStream(log, None, "x", every=30.0, clock=clock)
    stream.write("\rbar 1/3")
    stream.write("INFO something happened\n")
    clock.now += 40
    stream.write("\rbar 2/3")
    stream.write("\rbar 3/3")
    stream.write("\n")
    assert log.getvalue().splitlines() == ["bar 1/3", "INFO something happened", "bar 2/3", "bar 3/3"]


def test_bar_cleared_on_close_keeps_its_last_state():
    """leave=False bars erase themselves with blanks; the log still ends with their last state."""
    log, clock = io.StringIO(), FakeClock()
    stream = ProgressStream(log, None, "x", every=30.0, clock=clock)
    stream.write("\rinner 1/5")
    stream.write("\rinner 4/5")
    stream.write("\r" + " " * 20 + "\r")
    stream.close()
    assert log.getvalue().splitlines() == ["inner 1/5", "inner 4/5"]


def test_log_to_file_in_a_job_process(tmp_path):
    """A job (its own process, as under Snakemake) logs to the file and shows progress and warnings on stderr."""
    log = tmp_path / "logs" / "score" / "v" / "d.log"
    script = textwrap.dedent(f"""
        import logging
        from tqdm.auto import tqdm
        from presdep.runtime.logs import log_to_file
        log_to_file({str(log)!r}, every=0)
        logging.getLogger("presdep.job").info("starting")
        for _ in tqdm(range(5), desc="score d", unit="query", mininterval=0):
            pass
        logging.getLogger("presdep.job").warning("degenerate threshold")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = log.read_text()
    assert "\r" not in text
    assert "INFO presdep.job: starting" in text
    assert "WARNING presdep.job: degenerate threshold" in text
    assert "score d: 100%" in text and "5/5" in text
    console = proc.stderr.splitlines()
    assert any(l.startswith("[score/v/d] score d:") and "5/5" in l for l in console), console
    assert "[score/v/d] WARNING presdep.job: degenerate threshold" in console
    assert not any("starting" in l for l in console)  # info stays in the log
