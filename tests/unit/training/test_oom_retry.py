"""A training step that runs out of GPU memory restarts at half the budget, on the CPU by injection.

The out-of-memory error is torch's own (``torch.cuda.OutOfMemoryError``), raised from the
decoder's forward after it ran (so dropout has drawn and earlier micro-batches have left their
gradients, as a real late error would). Done when the run ends with the adapter bytes and the
train log of an uninterrupted run started at the smaller budget; ``train_log.parquet`` counts the
retries and the budget they left, and a resumed run keeps that budget.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest
import torch
from training_tiny import student_defaults, toy_data

from presdep.config.records import TrainingSettings
from presdep.training.loop import _set_up, train_student
from presdep.training.lora import tiny_causal_lm
from presdep.training.micro_batches import StepDoesNotFit, budget_in_force, cut_micro_batches
from presdep.training.oom import ALLOC_CONF, prefer_expandable_segments
from presdep.training.readout_grad import ReadoutScorer
from presdep.training.train_step import _step_batch, batch_for_step

REPO = Path(__file__).resolve().parents[3]
# Dropout on: a retry must draw the masks a run at the smaller budget draws.
LORA = {"r": 4, "alpha": 8, "dropout": 0.1, "target_modules": ["q_proj", "v_proj"]}
# 2 queries x 2 chunks = 4 OC-SFT items (2 views each, 8 prompts) per epoch, one epoch per step.
SETTINGS = {"objective": "oc_sft", "lambda": 1.0, "lambda_warmup_steps": 0, "steps": 2, "batch_chunks": 4,
            "lr": 5e-3, "checkpoint_every": 1, "lora": LORA}
# Columns that may differ between a run that ran out of memory and a clean one: wall time and the counters.
OOM_COLUMNS = ("seconds", "oom_retries", "oom_budget")


@pytest.fixture(scope="module")
def tokenizer(smollm2_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_model_dir)


class InjectedOOM:
    """Raises ``error`` from the decoder's training forwards whose 1-based call number ``fire`` accepts
    (after the forward ran); held-out reads (eval mode) pass."""

    def __init__(self, model, fire, error=torch.cuda.OutOfMemoryError):
        self.fire, self.error, self.calls, self.fired = fire, error, 0, 0
        self.handle = model.get_decoder().register_forward_hook(self)

    def __call__(self, module, args, output):
        if not module.training:
            return
        self.calls += 1
        if self.fire(self.calls):
            self.fired += 1
            raise self.error("CUDA out of memory. Tried to allocate 2.00 GiB (injected)")


def settings(**extra) -> TrainingSettings:
    return TrainingSettings.checked({**student_defaults(), **SETTINGS, **extra})


def train(tok, out, fire=None, error=torch.cuda.OutOfMemoryError, on_step=None, **extra):
    cands, silver, qrels = toy_data()
    model = tiny_causal_lm(tok, seed=0)
    inject = InjectedOOM(model, fire, error) if fire is not None else None
    student = settings(**extra)
    try:
        train_student(model, tok, silver=silver, train_candidates=cands, out_dir=out, student=student, B=2, seed=42,
                      train_qrels=qrels, on_step=on_step)
    finally:
        if inject is not None:
            inject.handle.remove()
    return inject


def adapter_bytes(run_dir: Path) -> dict[str, bytes]:
    files = sorted(p for p in (run_dir / "adapter").rglob("*") if p.is_file())
    assert files
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in files}


def first_step_tokens(tok, out: Path) -> int:
    """The padded tokens of step 1 read in one pass (its prompts x the longest), without training."""
    cands, silver, qrels = toy_data()
    run = _set_up(tiny_causal_lm(tok, seed=0), tok, student=settings(), out_dir=out, B=2, seed=42,
                  max_doc_chars=None, silver=silver, train_candidates=cands, train_qrels=qrels, objective=None)
    batch = _step_batch(run, batch_for_step(run.seed, 0, run.s.batch_chunks, run.n_items))
    built = [run.readout.build([(run.queries[it.query].query, [run.queries[it.query].docs[i] for i in v])
                                for v in it.views]) for it in batch]
    return sum(len(v) for v in built) * max(len(b.ids) for v in built for b in v)


def log_of(run_dir: Path) -> pl.DataFrame:
    return pl.read_parquet(run_dir / "train_log.parquet")


def assert_same_run(a: Path, b: Path) -> None:
    assert adapter_bytes(a) == adapter_bytes(b)
    la, lb = log_of(a).drop(OOM_COLUMNS), log_of(b).drop(OOM_COLUMNS)
    assert la.equals(lb), (la, lb)


def test_an_out_of_memory_step_restarts_at_half_the_budget_like_a_run_at_that_budget(tokenizer, tmp_path, caplog):
    # The CPU default reads a step in one pass; the first forward runs out (budget 'none' -> half the
    # step), then the retry's second micro-batch too, after the first left its gradient and drew dropout.
    with caplog.at_level("WARNING", logger="presdep.training.oom"):
        inject = train(tokenizer, tmp_path / "oom", fire=lambda call: call in (1, 3))
    assert inject.fired == 2
    log = log_of(tmp_path / "oom")
    assert log["oom_retries"].to_list() == [2, 0]
    budget = log["oom_budget"][0]
    assert log["oom_budget"].to_list() == [budget] * 2  # kept for the rest of the run
    lines = [r.getMessage() for r in caplog.records if "out of GPU memory" in r.getMessage()]
    assert len(lines) == 2 and "budget none (the whole step in one pass) ->" in lines[0]
    assert lines[1].endswith(f"-> {budget} padded tokens (kept for the rest of the run); the step restarts")
    assert log["micro_batches"].min() >= 2 and (log["padded_tokens"] <= log["micro_batches"] * budget).all()

    train(tokenizer, tmp_path / "clean", micro_batch_tokens=int(budget))
    assert log_of(tmp_path / "clean")["oom_retries"].to_list() == [0, 0]
    assert log_of(tmp_path / "clean")["oom_budget"].is_null().all()
    assert_same_run(tmp_path / "oom", tmp_path / "clean")


def test_a_numeric_budget_is_halved_and_a_resumed_run_keeps_the_halved_budget(tokenizer, tmp_path):
    start = first_step_tokens(tokenizer, tmp_path / "probe") // 2 + 1  # two micro-batches, the second runs out
    train(tokenizer, tmp_path / "oom", fire=lambda call: call == 2, micro_batch_tokens=start)
    log = log_of(tmp_path / "oom")
    assert log["oom_retries"].to_list() == [1, 0]
    halved = int(log["oom_budget"][0])
    assert halved <= start // 2 and log["oom_budget"].to_list() == [halved] * 2

    # Killed after step 1's checkpoint (after the retry), then resumed without running out: step 2 still
    # cuts at the halved budget, so the run ends as the uninterrupted one.
    class Killed(Exception):
        pass

    def stop_after_1(step):
        if step == 1:
            raise Killed

    resumed = tmp_path / "resumed"
    with pytest.raises(Killed):
        train(tokenizer, resumed, fire=lambda call: call == 2, micro_batch_tokens=start, on_step=stop_after_1)
    train(tokenizer, resumed, micro_batch_tokens=start)
    assert_same_run(resumed, tmp_path / "oom")
    assert log_of(resumed)["oom_budget"].to_list() == [halved] * 2

    at_half = tmp_path / "at_half"
    train(tokenizer, at_half, micro_batch_tokens=halved)
    assert_same_run(tmp_path / "oom", at_half)


def test_an_item_that_runs_out_alone_names_its_tokens_and_the_budget(tokenizer, tmp_path):
    with pytest.raises(StepDoesNotFit, match=r"train_student .* step 1: out of GPU memory reading one training item "
                                             r"alone \(2 prompt\(s\) of \d+ tokens = \d+ padded tokens; micro-batch "
                                             r"budget \d+ padded tokens\)") as err:
        train(tokenizer, tmp_path / "never", fire=lambda call: True)
    assert isinstance(err.value.__cause__, torch.OutOfMemoryError)


def test_other_runtime_errors_are_not_retried(tokenizer, tmp_path):
    calls = []

    def fire(call):
        calls.append(call)
        return True

    with pytest.raises(RuntimeError, match="injected") as err:
        train(tokenizer, tmp_path / "bug", fire=fire, error=RuntimeError)
    assert not isinstance(err.value, torch.OutOfMemoryError)
    assert calls == [1]  # raised at once: nothing caught it
    assert not (tmp_path / "bug" / "train_log.parquet").exists()


def test_the_heldout_scorer_halves_a_batch_that_runs_out(tokenizer):
    model = tiny_causal_lm(tokenizer, seed=5).eval()
    prompts = [(f"q {'long ' * k}", [f"doc {k} " * (k + 1), "short"]) for k in range(8)]
    want = ReadoutScorer(model, tokenizer, batch_prompts=2).score_prompts(prompts)
    calls = []

    def hook(module, args, kwargs):
        calls.append(kwargs["input_ids"].shape[0])
        if kwargs["input_ids"].shape[0] > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")

    handle = model.get_decoder().register_forward_pre_hook(hook, with_kwargs=True)
    try:
        scorer = ReadoutScorer(model, tokenizer, batch_prompts=4)
        got = scorer.score_prompts(prompts)
    finally:
        handle.remove()
    assert got == want
    assert calls == [4, 2, 2, 2, 2] and scorer.oom_cap == 2  # halved once, then read at 2


def test_cut_micro_batches_reads_an_item_above_the_cap_alone():
    sizes = [(2, 30), (2, 10), (2, 50), (1, 40), (2, 20)]
    assert [m.items for m in cut_micro_batches(sizes, None, 100)] == [(1, 4), (0,), (3,), (2,)]
    # The same cut as a budget of the cap, where every item fits it.
    assert cut_micro_batches(sizes, 1000, 120) == cut_micro_batches(sizes, 120)
    with pytest.raises(StepDoesNotFit, match="2 prompt.*50 tokens"):
        cut_micro_batches(sizes, 99, 50)  # the budget (the memory model's or the user's) still refuses
    assert [budget_in_force(b, c) for b, c in ((None, None), (10, None), (None, 7), (10, 7), (5, 7))] == [
        None, 10, 7, 7, 5]


def test_expandable_segments_unless_the_user_configured_the_allocator(monkeypatch):
    applied = []
    monkeypatch.setattr(torch._C, "_accelerator_setAllocatorSettings", applied.append, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    env: dict[str, str] = {}
    assert prefer_expandable_segments(env) and env == {"PYTORCH_CUDA_ALLOC_CONF": ALLOC_CONF}
    assert applied == [ALLOC_CONF]  # a process that loaded torch already is told directly
    for theirs in ({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}, {"PYTORCH_ALLOC_CONF": "backend:native"}):
        env = dict(theirs)
        assert not prefer_expandable_segments(env) and env == theirs
    assert applied == [ALLOC_CONF]
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # too late: the variable alone
    env = {}
    assert prefer_expandable_segments(env) and applied == [ALLOC_CONF]


# The train_student script run as far as its imports go (no snakemake object: it stops there), noting
# the allocator variable at the moment torch starts loading.
_SCRIPT_CHILD = textwrap.dedent(
    """
    import importlib.abc, os, runpy, sys
    seen = []
    class Watch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" and not seen:
                seen.append(os.environ.get("PYTORCH_CUDA_ALLOC_CONF"))
            return None
    sys.meta_path.insert(0, Watch())
    try:
        runpy.run_path(sys.argv[1])
    except NameError as exc:
        assert "snakemake" in str(exc), exc
    print(seen[0])
    """
)


@pytest.mark.parametrize("theirs", [None, "max_split_size_mb:128"])
def test_the_training_script_sets_the_allocator_before_torch_loads(theirs):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
    if theirs:
        env["PYTORCH_CUDA_ALLOC_CONF"] = theirs
    res = subprocess.run([sys.executable, "-c", _SCRIPT_CHILD, str(REPO / "scripts" / "train_student.py")],
                         env=env, cwd=str(REPO), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines()[-1] == (theirs or ALLOC_CONF)
