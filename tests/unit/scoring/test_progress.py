"""A score job's progress: a bar in prompts that moves per batch, not per query.

With the interval (presdep.runtime.logs.PROGRESS_EVERY_S) made small, a job writes its first
progress line before its first query is done, then lines with prompts done of total, tokens,
the rate and the time left, also while one slow read or another job's read is awaited."""

from __future__ import annotations

import io
import re
import sys
import time
from typing import ClassVar

import polars as pl
import pytest
import torch

from presdep.config.records import Protocol, ScoringRun
from presdep.contracts.schemas import read_table
from presdep.runtime import logs
from presdep.runtime.logs import ProgressStream
from presdep.scoring.backends import TransformersScorer
from presdep.scoring.read_through import ReadThrough
from presdep.scoring.run import score_dataset

V = {"chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 2, "capcal_beta": 1.0,
     "scorer": "transformers"}
PROTO = {"seed": 7, "M": 2, "B": 2, "perturbations": ["random_shuffle"], "max_doc_chars": 60}
EVERY = 0.2
LINE = re.compile(r"^score toy: .*\| (\d+)/(\d+) \[([0-9:]+)<([0-9:?]+), ([^,\]]+), ([\d,]+) tokens, ([\d,]+) tok/s\]$")


def candidates(n_queries: int, n_docs: int = 6) -> pl.DataFrame:
    rows = [(f"q{q}", f"question number {q}", f"q{q}d{r}", f"document {r} of query {q} about water", r, 1.0 / r)
            for q in range(n_queries) for r in range(1, n_docs + 1)]
    return pl.DataFrame(rows, schema=["query_id", "query", "doc_id", "doc", "first_stage_rank", "first_stage_score"],
                        orient="row").with_columns(pl.col("first_stage_rank").cast(pl.Int32))


@pytest.fixture(scope="module")
def tiny(smollm2_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    tok = AutoTokenizer.from_pretrained(smollm2_model_dir)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval(), tok


class Slow(TransformersScorer):
    """Sleeps per batch, and keeps what the job's log held when each of its reads ended."""

    delays: ClassVar[list[float]] = [0.0]

    def __init__(self, *a, log: io.StringIO, **kw):
        super().__init__(*a, **kw)
        self.log, self.calls, self.seen = log, 0, []

    def prepare(self, prompts):  # once per call of the job (its prompts of several queries)
        self.calls += 1
        return super().prepare(prompts)

    def read_built(self, built):
        time.sleep(self.delays[min(len(self.seen), len(self.delays) - 1)])
        out = super().read_built(built)
        self.seen.append((self.calls, self.log.getvalue()))
        return out


def job_log(monkeypatch) -> io.StringIO:
    """stderr as a score job has it (presdep.runtime.logs.log_to_file), with a small interval.
    Called in the test itself: pytest sets its own sys.stderr again after the fixtures."""
    monkeypatch.setattr(logs, "PROGRESS_EVERY_S", EVERY)
    log, console = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", ProgressStream(log, console, "score/v/toy", every=EVERY))
    return log


def progress_lines(text: str) -> list[re.Match]:
    out = [LINE.match(line) for line in text.splitlines() if line.startswith("score toy:")]
    assert all(out), text
    return out


def test_the_first_line_comes_before_the_first_query_is_done_and_lines_carry_counts_rate_and_eta(
        tmp_path, tiny, monkeypatch):
    log = job_log(monkeypatch)
    model, tok = tiny
    Slow.delays = [0.12]  # 27 reads: about 3 s, so the time left shows while it runs
    sc = Slow(model, tok, max_doc_chars=60, batch_size=1, model_identity={"test": "progress"}, log=log)
    cand = candidates(3)
    score_dataset(cand, dataset="toy", run=ScoringRun.checked(V), protocol=Protocol.checked(PROTO),
                  out_path=tmp_path / "s.parquet", scorer=sc, read_cache=tmp_path / "cache")
    scores = read_table(tmp_path / "s.parquet", "scores")
    total = scores.select("perturbation", "presentation", "query_id", "prompt").unique().height
    # What the log held when the first call's last read ended (before its queries were written).
    first_query = [text for call, text in sc.seen if call == 1]
    early = progress_lines(first_query[-1])
    assert early and int(early[0][1]) == 0 and int(early[0][2]) == total  # the bar's first line: 0 of all prompts
    assert any(0 < int(m[1]) < total for m in early)  # it moved inside the first query
    lines = progress_lines(log.getvalue())
    done = [int(m[1]) for m in lines]
    assert done == sorted(done) and done[-1] == total and all(int(m[2]) == total for m in lines)
    assert len(lines) >= 4
    last = lines[-1]
    assert "prompt/s" in last[5] or "s/prompt" in last[5]  # the rate
    assert last[4] == "00:00"  # the time left, at the end
    assert any(m[4] not in ("?", "00:00") or int(m[1]) == 0 for m in lines[1:-1])  # an ETA while running
    assert int(last[6].replace(",", "")) == sc.tokens_read > 0


def test_a_slow_read_still_gets_lines_with_the_same_count(tmp_path, tiny, monkeypatch):
    """One read far longer than the interval (a long batch, the weights loading, another job's
    read awaited): the heartbeat keeps writing lines while the count stands still."""
    log = job_log(monkeypatch)
    model, tok = tiny
    Slow.delays = [0.0, 1.5, 0.0]  # the second read is slow
    sc = Slow(model, tok, max_doc_chars=60, batch_size=1, model_identity={"test": "progress"}, log=log)
    score_dataset(candidates(1), dataset="toy", run=ScoringRun.checked(V), protocol=Protocol.checked(PROTO),
                  out_path=tmp_path / "s.parquet", scorer=sc, read_cache=tmp_path / "cache")
    before = progress_lines(sc.seen[0][1])  # the log when the first read ended, and the second
    during = progress_lines(sc.seen[1][1])[len(before):]
    counts = [int(m[1]) for m in during]
    stalled = [m for m in during if int(m[1]) == max(set(counts), key=counts.count)]
    assert 0 < int(stalled[0][1]) < int(stalled[0][2])
    assert len(stalled) >= 4  # 1.5 s of one read: a line every 0.2 s, with the same count
    assert len({m[7] for m in stalled}) >= 4  # and the token rate falling


def test_a_scorer_without_progress_moves_the_bar_per_query(tmp_path, monkeypatch):
    log = job_log(monkeypatch)
    score_dataset(candidates(3), dataset="toy", run=ScoringRun.checked({**V, "scorer": "identity"}),
                  protocol=Protocol.checked(PROTO), out_path=tmp_path / "s.parquet")
    lines = progress_lines(log.getvalue())
    per_query = 3 * 3  # first stage + M = 2 shuffles, 3 prompts each (6 documents, B = 2)
    assert int(lines[-1][1]) == int(lines[-1][2]) == 3 * per_query
    assert {int(m[1]) for m in lines} <= {0, per_query, 2 * per_query, 3 * per_query}


def test_the_scorer_reports_every_prompt_once_hits_repeats_and_reads(tmp_path, tiny):
    """What moves the bar adds up: each prompt asked for once (read, repeated in the call, or a
    cache hit), and every token the model read."""
    model, tok = tiny
    sc = ReadThrough(TransformersScorer(model, tok, max_doc_chars=60, batch_size=2, model_identity={"test": "progress"}),
                     tmp_path / "cache")
    got = []
    sc.on_progress = lambda prompts, tokens: got.append((prompts, tokens))
    a, b, c = ("q", ["one doc", "two doc"]), ("q", ["two doc", "one doc"]), ("q", ["three doc"])
    sc.slot_probs([a, b])
    assert sum(p for p, _ in got) == 2 and sum(t for _, t in got) == sc.tokens_read > 0
    got.clear()
    sc.slot_probs([a, c, c, b, c])  # two hits, one prompt read once for three uses
    assert sum(p for p, _ in got) == 5 and sc.prompts_read == 3
    assert sum(t for _, t in got) == sc.tokens_read - sum(len(sc.build(*x).ids) for x in (a, b))
    assert sc.distinct_prompts == 3
