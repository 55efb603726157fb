"""LoRA training on a tiny random model with the real SmolLM2 tokenizer.

Equivalences checked step for step (same seed, CPU): OC-SFT at lambda = 0 is
two-view permutation augmentation; DebiasFirst with uniform weights is
permutation augmentation; a training killed after a checkpoint resumes and ends
with the same adapter as an uninterrupted run. Plus lambda selection by hand.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest
import torch

from presdep.training.loop import batch_for_step, latest_checkpoint, train_student
from presdep.training.lora import add_lora, tiny_causal_lm
from presdep.training.readout_grad import GradReadout
from presdep.training.select import select_lambda

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tokenizer(smollm2_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_model_dir)


def toy_data(n_queries=2, n_docs=4, all_relevant=False):
    rows, silver, qrels = [], [], []
    for q in range(n_queries):
        for d in range(n_docs):
            did = f"q{q}-d{d}"
            rows.append({"query_id": f"q{q}", "query": f"where was entity {q} born", "doc_id": did,
                         "doc": f"entity {d} was born in town {q * 7 + d}", "first_stage_rank": d + 1,
                         "first_stage_score": float(n_docs - d)})
            for t in range(3):
                silver.append({"query_id": f"q{q}", "doc_id": did, "teacher": "toy", "presentation": t,
                               "score": float((d + t + q) % 4), "label": float((d + q) % 4) / 2})
            qrels.append({"query_id": f"q{q}", "doc_id": did, "relevance": 1 if all_relevant or d == q % n_docs else 0})
    cands = pl.DataFrame(rows).with_columns(pl.col("first_stage_rank").cast(pl.Int32))
    return cands, pl.DataFrame(silver).with_columns(pl.col("presentation").cast(pl.Int32)), pl.DataFrame(qrels)


def run_training(tok, out, student, seed=3, heldout=False, all_relevant=False):
    cands, silver, qrels = toy_data(all_relevant=all_relevant)
    model = tiny_causal_lm(tok, seed=0)
    return train_student(
        model, tok, silver=silver, train_candidates=cands, out_dir=out, student=student, B=2, seed=seed,
        train_qrels=qrels, heldout_candidates=cands if heldout else None, heldout_qrels=qrels if heldout else None,
    )


def adapter_tensors(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "adapter" / "adapter_model.safetensors"))


def assert_same_adapter(a: Path, b: Path):
    ta, tb = adapter_tensors(a), adapter_tensors(b)
    assert ta.keys() == tb.keys() and ta
    for k in ta:
        assert torch.equal(ta[k], tb[k]), k


BASE = {"steps": 3, "batch_chunks": 2, "lr": 5e-3, "checkpoint_every": 3, "lora": {"r": 4, "alpha": 8, "dropout": 0.1}}


def test_lora_gradients_reach_only_adapter_weights(tokenizer):
    model = add_lora(tiny_causal_lm(tokenizer, 0), {"r": 4, "alpha": 8, "dropout": 0.0}, seed=1)
    model.train()
    readout = GradReadout(model, tokenizer)
    s = readout.expected_grades([("where was x born", ["x was born in y", "z is a cello"])])[0]
    ((s - torch.tensor([3.0, 0.0])) ** 2).mean().backward()
    with_grad = [n for n, p in model.named_parameters() if p.grad is not None]
    assert with_grad and all("lora_" in n for n in with_grad)
    assert all(p.grad is None for n, p in model.named_parameters() if "lora_" not in n)
    assert any(p.grad.abs().sum() > 0 for n, p in model.named_parameters() if "lora_B" in n)


def test_readout_matches_full_logits(tokenizer):
    model = tiny_causal_lm(tokenizer, 0)
    readout = GradReadout(model, tokenizer)
    prompts = [("q one", ["a", "b b b b b b"]), ("query two is longer", ["c", "d", "e"])]
    got = readout.expected_grades(prompts)  # batched, right-padded
    for (q, d), g in zip(prompts, got):
        p = readout.builder.build(q, d)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([p.ids])).logits[0, p.read_positions][:, readout.grade_ids]
        e = torch.softmax(logits, -1) @ torch.arange(4.0)
        assert torch.allclose(g, e, atol=1e-5)


def test_oc_sft_lambda_zero_equals_two_view_perm_aug(tokenizer, tmp_path):
    a = run_training(tokenizer, tmp_path / "oc", {**BASE, "objective": "oc_sft", "lambda": 0.0})
    b = run_training(tokenizer, tmp_path / "pa", {**BASE, "objective": "perm_aug", "n_views": 2})
    la, lb = pl.read_parquet(tmp_path / "oc" / "train_log.parquet"), pl.read_parquet(tmp_path / "pa" / "train_log.parquet")
    assert la["loss"].to_list() == lb["loss"].to_list()
    assert_same_adapter(tmp_path / "oc", tmp_path / "pa")
    assert a["objective"]["n_views"] == b["objective"]["n_views"] == 2
    # and lambda > 0 does change the trajectory
    run_training(tokenizer, tmp_path / "oc5", {**BASE, "objective": "oc_sft", "lambda": 5.0})
    l5 = pl.read_parquet(tmp_path / "oc5" / "train_log.parquet")
    assert l5["loss"].to_list()[1:] != la["loss"].to_list()[1:]


def test_debias_first_uniform_weights_equals_perm_aug(tokenizer, tmp_path):
    # every document relevant: p[s] equal at every slot, so the weights are exactly 1
    d = run_training(tokenizer, tmp_path / "db", {**BASE, "objective": "debias_first"}, all_relevant=True)
    assert d["objective"]["slot_weights"] == [1.0, 1.0]
    run_training(tokenizer, tmp_path / "pa", {**BASE, "objective": "perm_aug"}, all_relevant=True)
    assert_same_adapter(tmp_path / "db", tmp_path / "pa")


def test_outputs_heldout_and_checkpoints(tokenizer, tmp_path):
    out = tmp_path / "run"
    done = run_training(tokenizer, out, {**BASE, "objective": "single_order", "steps": 4, "checkpoint_every": 2},
                        heldout=True)
    log = pl.read_parquet(out / "train_log.parquet")
    assert log["step"].to_list() == [1, 2, 3, 4]
    assert log["heldout_ndcg10"].is_null().to_list() == [True, False, True, False]
    held = pl.read_parquet(out / "heldout.parquet")
    assert sorted(set(held["step"].to_list())) == [2, 4] and held.height == 4
    assert done["checkpoints"] == [2, 4] and set(done["heldout"]) == {"2", "4"}
    assert (out / "checkpoints" / "step000002" / "adapter" / "adapter_config.json").exists()
    assert not (out / "checkpoints" / "step000002" / "trainer.pt").exists()  # only the newest keeps optimizer state
    assert latest_checkpoint(out).name == "step000004"
    assert json.loads((out / "done.json").read_text())["steps"] == 4
    # same settings: resumes at the end, no step re-run; other settings: stale checkpoints discarded
    again = run_training(tokenizer, out, {**BASE, "objective": "single_order", "steps": 4, "checkpoint_every": 2},
                         heldout=True)
    assert again["resumed_from_step"] == 4 and again["seconds_per_step"] is None
    assert pl.read_parquet(out / "train_log.parquet").equals(log)
    other = run_training(tokenizer, out, {**BASE, "objective": "single_order", "steps": 2, "checkpoint_every": 2,
                                          "lr": 1e-3})
    assert other["resumed_from_step"] is None and other["checkpoints"] == [2]


def test_batches_cover_each_epoch_once():
    seen = [i for s in range(5) for e, i in batch_for_step(7, s, 2, 5) if e == 0]
    assert sorted(seen) == list(range(5))
    assert batch_for_step(7, 3, 2, 5) == batch_for_step(7, 3, 2, 5)


_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    torch.set_num_threads(1)
    sys.path.insert(0, {tests!r})
    from transformers import AutoTokenizer
    from test_training_loop import BASE, toy_data
    from presdep.training.loop import train_student
    from presdep.training.lora import tiny_causal_lm
    tok = AutoTokenizer.from_pretrained({tok!r})
    cands, silver, qrels = toy_data()
    kill_at = int(os.environ.get("KILL_AT", "0"))
    def on_step(step):
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    student = {{**BASE, "objective": "oc_sft", "lambda": 2.0, "lambda_warmup_steps": 2, "steps": 5,
               "checkpoint_every": 2}}
    train_student(tiny_causal_lm(tok, 0), tok, silver=silver, train_candidates=cands, out_dir=sys.argv[1],
                  student=student, B=2, seed=5, on_step=on_step)
    """
)


@pytest.mark.slow
def test_killed_training_resumes_to_the_same_adapter(tokenizer, smollm2_model_dir, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(tests=str(Path(__file__).parent), tok=str(smollm2_model_dir)))
    env = {**os.environ, "PYTHONHASHSEED": "0"}

    def run(out, kill_at):
        return subprocess.run([sys.executable, str(script), str(out)], env={**env, "KILL_AT": str(kill_at)},
                              capture_output=True, text=True, timeout=240)

    killed = tmp_path / "killed"
    r = run(killed, 3)  # SIGKILL after step 3: the checkpoint of step 2 survives, step 3 is lost
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
    assert latest_checkpoint(killed).name == "step000002" and not (killed / "done.json").exists()
    r = run(killed, 0)
    assert r.returncode == 0, r.stderr[-2000:]
    done = json.loads((killed / "done.json").read_text())
    assert done["resumed_from_step"] == 2
    straight = tmp_path / "straight"
    r = run(straight, 0)
    assert r.returncode == 0, r.stderr[-2000:]
    assert_same_adapter(killed, straight)
    la, lb = pl.read_parquet(killed / "train_log.parquet"), pl.read_parquet(straight / "train_log.parquet")
    assert la["loss"].to_list() == lb["loss"].to_list() and la.height == 5


def _fake_run(root: Path, lam: float, seed: int, curve: dict[int, list[float]]):
    d = root / f"l{lam}-s{seed}"
    rows = []
    for step, vals in curve.items():
        (d / "checkpoints" / f"step{step:06d}" / "adapter").mkdir(parents=True, exist_ok=True)
        (d / "checkpoints" / f"step{step:06d}" / "adapter" / "adapter_config.json").write_text("{}")
        rows += [{"step": step, "query_id": f"q{i}", "ndcg10": v} for i, v in enumerate(vals)]
    pl.DataFrame(rows).write_parquet(d / "heldout.parquet")
    return {"lambda": lam, "seed": seed, "dir": str(d)}


def test_select_lambda_one_standard_error_rule(tmp_path):
    runs = [
        # lambda 0: best 0.6 at step 10 (values 0.4, 0.8: SE = std([.4,.8], ddof=1)/sqrt(2) = 0.2)
        _fake_run(tmp_path, 0.0, 1, {10: [0.4, 0.8], 20: [0.3, 0.7]}),
        # lambda 1: best 0.5 at steps 10 and 20 -> earliest 10; within 0.6 - 0.2
        _fake_run(tmp_path, 1.0, 1, {10: [0.5, 0.5], 20: [0.5, 0.5]}),
        # lambda 5: best 0.35 -> outside the band
        _fake_run(tmp_path, 5.0, 1, {10: [0.3, 0.4], 20: [0.2, 0.3]}),
    ]
    rec = select_lambda(runs)
    assert rec["best"]["lambda"] == 0.0 and rec["best"]["se"] == pytest.approx(0.2)
    assert rec["lambda"] == 1.0 and rec["step"] == 10
    assert rec["adapters"] == {"1": str(Path(runs[1]["dir"]) / "checkpoints" / "step000010" / "adapter")}
    assert rec["test_data_used"] is False


def test_select_lambda_averages_seeds_per_query(tmp_path):
    runs = [
        _fake_run(tmp_path, 0.0, 1, {5: [0.2, 0.4]}), _fake_run(tmp_path, 0.0, 2, {5: [0.4, 0.6]}),
        _fake_run(tmp_path, 2.0, 1, {5: [0.9, 0.9]}), _fake_run(tmp_path, 2.0, 2, {5: [0.1, 0.1]}),
    ]
    rec = select_lambda(runs)
    by = {c["lambda"]: c for c in rec["candidates"]}
    assert by[0.0]["best_ndcg10"] == pytest.approx(0.4) and by[2.0]["best_ndcg10"] == pytest.approx(0.5)
    assert by[2.0]["se"] == pytest.approx(0.0)
    assert rec["lambda"] == 2.0 and set(rec["adapters"]) == {"1", "2"}
