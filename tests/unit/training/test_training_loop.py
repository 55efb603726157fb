"""LoRA training on a tiny random model with the real SmolLM2 tokenizer.

Equivalences checked step for step (same seed, CPU): OC-SFT at lambda = 0 is
training on view A alone (an objective written here from METHODS.md); DebiasFirst
with all-ones weights is permutation augmentation; a training killed after a
checkpoint resumes and ends with the same adapter as an uninterrupted run. The
student settings come from the config schema's defaults, as in the workflow.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest
import torch
from training_tiny import student_defaults, toy_data

from presdep.config.records import TrainingSettings
from presdep.contracts.json_artifacts import read_json_artifact
from presdep.contracts.presentations import random_shuffle, stable_seed
from presdep.training.loop import batch_for_step, latest_checkpoint, train_student
from presdep.training.lora import add_lora, tiny_causal_lm
from presdep.training.objectives import Objective, TrainItem
from presdep.training.readout_grad import GradReadout

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def tokenizer(smollm2_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_model_dir)


def run_training(tok, out, student, seed=42, heldout=False, all_relevant=False, objective=None):
    cands, silver, qrels = toy_data(all_relevant=all_relevant)
    model = tiny_causal_lm(tok, seed=0)
    return train_student(
        model, tok, silver=silver, train_candidates=cands, out_dir=out, student=TrainingSettings.checked({**student_defaults(), **student}),
        B=2, seed=seed, train_qrels=qrels, heldout_candidates=cands if heldout else None,
        heldout_qrels=qrels if heldout else None, objective=objective,
    )


def adapter_tensors(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "adapter" / "adapter_model.safetensors"))


def assert_same_adapter(a: Path, b: Path):
    ta, tb = adapter_tensors(a), adapter_tensors(b)
    assert ta.keys() == tb.keys() and ta
    for k in ta:
        assert torch.equal(ta[k], tb[k]), k


LORA = {"r": 4, "alpha": 8, "dropout": 0.1, "target_modules": ["q_proj", "v_proj"]}
BASE = {"steps": 3, "batch_chunks": 2, "lr": 5e-3, "checkpoint_every": 3, "lora": LORA}


def test_schema_defaults_are_the_methods_training_settings():
    d = student_defaults()
    assert d["lora"] == {"r": 16, "alpha": 32, "dropout": 0.05,
                         "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"]}
    assert (d["lr"], d["weight_decay"], d["betas"], d["lr_warmup_ratio"]) == (2e-4, 0.01, [0.9, 0.95], 0.05)
    assert (d["lambda_warmup_steps"], d["n_views"], d["view_seed_base"], d["seeds"]) == (500, 2, 42, [42, 43, 44])
    assert d["lambda_rule"] == {"rerank": "one_se", "qa": "seed_mean", "response": "fixed"}
    assert d["lambda_fixed"] == 1.0
    TrainingSettings.checked({**d, "objective": "oc_sft"})  # the loop accepts exactly what the schema fills in
    with pytest.raises(ValueError, match="lack"):
        TrainingSettings.checked({"objective": "oc_sft"})


def test_lora_gradients_reach_only_adapter_weights(tokenizer):
    model = add_lora(tiny_causal_lm(tokenizer, 0), {**LORA, "dropout": 0.0}, seed=1)
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


class ViewAOnly(Objective):
    """Single-view training on OC-SFT's view A, written from METHODS.md: view A of first-stage chunk j
    is the chunk shuffled with the first view seed; loss = squared error to k1 over the labelled slots."""

    name = "view_a_only"
    label = "k1"

    def items(self, queries, epoch):
        out = []
        for qi, q in enumerate(queries):
            for j in range(math.ceil(len(q) / self.B)):
                members = list(range(j * self.B, min((j + 1) * self.B, len(q))))
                seed = stable_seed(self.view_seeds[0], "chunk_view", epoch, q.query_id, j)
                out.append(TrainItem(qi, (tuple(random_shuffle(members, seed)),)))
        return out

    def loss(self, queries, batch, scores, step):
        errs = [(s[0][slot] - queries[it.query].label_k1[d]) ** 2
                for it, s in zip(batch, scores) for slot, d in enumerate(it.views[0])]
        total = torch.stack(errs).sum() / len(errs)
        return total, {"loss": float(total.detach()), "supervised": float(total.detach())}


def test_oc_sft_lambda_zero_equals_single_view_training_on_view_a(tokenizer, tmp_path):
    # No dropout: a second view in the batch would otherwise draw other dropout masks.
    settings = {**BASE, "objective": "oc_sft", "lambda": 0.0, "lora": {**LORA, "dropout": 0.0}}
    oc = run_training(tokenizer, tmp_path / "oc", settings)
    assert oc["view_seeds"] == [0, 1] and oc["objective"]["view_seeds"] == [0, 1]
    ref = run_training(tokenizer, tmp_path / "a", settings, objective=ViewAOnly(2, [0, 1]))
    assert ref["objective"]["objective"] == "view_a_only"
    la, lr = pl.read_parquet(tmp_path / "oc" / "train_log.parquet"), pl.read_parquet(tmp_path / "a" / "train_log.parquet")
    torch.testing.assert_close(la["supervised"].to_list(), lr["supervised"].to_list(), rtol=1e-6, atol=1e-7)
    ta, tr = adapter_tensors(tmp_path / "oc"), adapter_tensors(tmp_path / "a")
    assert ta.keys() == tr.keys()
    for k in ta:
        torch.testing.assert_close(ta[k], tr[k], rtol=1e-5, atol=1e-7)
    # and lambda > 0 (warm-up 0) does change the trajectory
    run_training(tokenizer, tmp_path / "oc5", {**settings, "lambda": 5.0, "lambda_warmup_steps": 0})
    l5 = pl.read_parquet(tmp_path / "oc5" / "train_log.parquet")
    assert l5["loss"].to_list()[1:] != la["loss"].to_list()[1:]


def test_debias_first_all_ones_weights_equals_perm_aug_step_for_step(tokenizer, tmp_path):
    # every document relevant: each slot holds the same share, so the weights are exactly 1
    d = run_training(tokenizer, tmp_path / "db", {**BASE, "objective": "debias_first"}, all_relevant=True)
    assert d["objective"]["slot_weights"] == [1.0, 1.0]
    p = run_training(tokenizer, tmp_path / "pa", {**BASE, "objective": "perm_aug"}, all_relevant=True)
    assert_same_adapter(tmp_path / "db", tmp_path / "pa")
    ld, lp = pl.read_parquet(tmp_path / "db" / "train_log.parquet"), pl.read_parquet(tmp_path / "pa" / "train_log.parquet")
    assert ld["loss"].to_list() == lp["loss"].to_list()
    # whole-list views: 2 view seeds x (2 queries x 4 documents / B = 2) prompts per epoch
    assert d["items_per_epoch"] == p["items_per_epoch"] == 8


def test_view_seeds_follow_the_training_seed_and_are_recorded(tokenizer, tmp_path):
    done = run_training(tokenizer, tmp_path / "s43", {**BASE, "objective": "perm_aug", "steps": 1,
                                                       "checkpoint_every": 1}, seed=43)
    assert done["view_seeds"] == [2, 3] and "N*(s - base)" in done["view_seed_rule"]
    meta = pl.read_parquet_metadata(tmp_path / "s43" / "train_log.parquet")
    assert json.loads(meta["view_seeds"]) == [2, 3] and meta["seed"] == "43"
    with pytest.raises(ValueError, match="view_seed_base"):
        run_training(tokenizer, tmp_path / "s1", {**BASE, "objective": "perm_aug"}, seed=1)


def test_optimizer_settings_and_lr_warmup_ratio(tokenizer, tmp_path):
    out = tmp_path / "opt"
    run_training(tokenizer, out, {**BASE, "objective": "single_order", "steps": 4, "checkpoint_every": 4,
                                  "lr_warmup_ratio": 0.4})
    # ceil(0.4 * 4) = 2 warm-up steps: lr * 1/2, lr, lr, lr
    assert pl.read_parquet(out / "train_log.parquet")["lr"].to_list() == pytest.approx([2.5e-3, 5e-3, 5e-3, 5e-3])
    group = torch.load(out / "checkpoints" / "step000004" / "trainer.pt", weights_only=False)["optimizer"]["param_groups"][0]
    assert tuple(group["betas"]) == (0.9, 0.95) and group["weight_decay"] == 0.01


def test_outputs_heldout_and_checkpoints(tokenizer, tmp_path):
    out = tmp_path / "run"
    done = run_training(tokenizer, out, {**BASE, "objective": "single_order", "steps": 4, "checkpoint_every": 2},
                        heldout=True)
    log = pl.read_parquet(out / "train_log.parquet")
    assert log["step"].to_list() == [1, 2, 3, 4]
    assert log["heldout_ndcg10"].is_null().to_list() == [True, False, True, False]
    held = pl.read_parquet(out / "heldout.parquet")
    assert sorted(set(held["step"].to_list())) == [2, 4] and held.height == 4
    assert done["checkpoints"] == [2, 4] and set(done["heldout"]) == {"2", "4"} == set(done["heldout_score_std"])
    assert log["heldout_score_std"].is_null().to_list() == [True, False, True, False]
    assert (out / "checkpoints" / "step000002" / "adapter" / "adapter_config.json").exists()
    assert not (out / "checkpoints" / "step000002" / "trainer.pt").exists()  # only the newest keeps optimizer state
    assert latest_checkpoint(out).name == "step000004"
    assert json.loads((out / "done.json").read_text())["steps"] == 4
    # written with its digest: what select_lambda reads back (verified) is what training recorded
    assert read_json_artifact(out / "done.json", "training run record") == json.loads(json.dumps(done, default=str))
    # same settings: resumes at the end, no step re-run; other settings: stale checkpoints discarded
    again = run_training(tokenizer, out, {**BASE, "objective": "single_order", "steps": 4, "checkpoint_every": 2},
                         heldout=True)
    assert again["resumed_from_step"] == 4 and again["seconds_per_step"] is None
    assert pl.read_parquet(out / "train_log.parquet").equals(log)
    other = run_training(tokenizer, out, {**BASE, "objective": "single_order", "steps": 2, "checkpoint_every": 2,
                                          "lr": 1e-3})
    assert other["resumed_from_step"] is None and other["checkpoints"] == [2]


def test_selection_reads_what_training_writes(tokenizer, tmp_path):
    from presdep.training.select import select_lambda

    runs = []
    for lam in (0.0, 2.0):
        out = tmp_path / f"l{lam}"
        run_training(tokenizer, out, {**BASE, "objective": "oc_sft", "lambda": lam, "lambda_warmup_steps": 1,
                                      "steps": 2, "checkpoint_every": 1}, heldout=True)
        runs.append({"lambda": lam, "seed": 42, "dir": str(out)})
    rec = select_lambda(runs, rule="one_se", converged_step=1, collapse_floor=0.0, task="rerank")
    dec = rec["decisions"]["42"]
    assert [c["n_converged"] for c in dec["candidates"]] == [2, 2] and dec["lambda"] in (0.0, 2.0)
    assert Path(rec["adapters"]["42"], "adapter_config.json").exists()
    # a floor above every recorded score spread excludes both candidates: abstain
    spread = max(json.loads((tmp_path / f"l{lam}" / "done.json").read_text())["heldout_score_std"]["1"] for lam in (0.0, 2.0))
    with pytest.raises(ValueError, match="usable"):
        select_lambda(runs, rule="one_se", converged_step=1, collapse_floor=spread + 1.0)


def test_a_checkpoint_restores_adapter_optimizer_and_rng(tokenizer, tmp_path):
    from presdep.training.checkpoints import restore_checkpoint, run_fingerprint, write_checkpoint

    def lora_and_adamw(seed):
        model = add_lora(tiny_causal_lm(tokenizer, 0), LORA, seed=seed)
        params = [p for p in model.parameters() if p.requires_grad]
        return model, params, torch.optim.AdamW(params, lr=1e-2)

    model, params, opt = lora_and_adamw(1)
    sum(p.sum() for p in params).backward()
    opt.step()
    torch.manual_seed(5)
    rows, held = [{"step": 1, "loss": 0.5}], [{"step": 1, "query_id": "q0", "ndcg10": 1.0}]
    write_checkpoint(tmp_path, 1, model, opt, rows, held)
    write_checkpoint(tmp_path, 2, model, opt, rows, held)
    assert latest_checkpoint(tmp_path).name == "step000002"
    assert not (tmp_path / "checkpoints" / "step000001" / "trainer.pt").exists()
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")]  # no temporary folders
    want = torch.rand(3)
    other, other_params, other_opt = lora_and_adamw(2)
    assert not all(torch.equal(a, b) for a, b in zip(params, other_params))
    assert restore_checkpoint(latest_checkpoint(tmp_path), other, other_opt) == (rows, held, 2)
    assert all(torch.equal(a, b) for a, b in zip(params, other_params))
    assert other_opt.state_dict()["state"].keys() == opt.state_dict()["state"].keys()
    assert torch.equal(torch.rand(3), want)  # the RNG continues where the checkpoint left it
    frame = pl.DataFrame({"a": [2, 1], "b": ["y", "x"]})
    assert run_fingerprint({}, 2, 42, None, frame) == run_fingerprint({}, 2, 42, None, frame.reverse())
    assert run_fingerprint({}, 2, 42, None, frame) != run_fingerprint({}, 2, 43, None, frame)


def test_batches_cover_each_epoch_once():
    seen = [i for s in range(5) for e, i in batch_for_step(7, s, 2, 5) if e == 0]
    assert sorted(seen) == list(range(5))
    assert batch_for_step(7, 3, 2, 5) == batch_for_step(7, 3, 2, 5)


_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    torch.set_num_threads(1)
    sys.path[:0] = [{tests!r}, {helpers!r}]
    from transformers import AutoTokenizer
    from test_training_loop import BASE, student_defaults, toy_data
    from presdep.config.records import TrainingSettings
    from presdep.training.loop import train_student
    from presdep.training.lora import tiny_causal_lm
    tok = AutoTokenizer.from_pretrained({tok!r})
    cands, silver, qrels = toy_data()
    kill_at = int(os.environ.get("KILL_AT", "0"))
    def on_step(step):
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    student = {{**student_defaults(), **BASE, "objective": "oc_sft", "lambda": 2.0, "lambda_warmup_steps": 2, "steps": 5,
               "checkpoint_every": 2}}
    train_student(tiny_causal_lm(tok, 0), tok, silver=silver, train_candidates=cands, out_dir=sys.argv[1],
                  student=TrainingSettings.checked(student), B=2, seed=42, on_step=on_step)
    """
)


@pytest.mark.slow
def test_killed_training_resumes_to_the_same_adapter(tokenizer, smollm2_model_dir, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(tests=str(Path(__file__).resolve().parent), helpers=str(REPO / "tests"),
                                    tok=str(smollm2_model_dir)))
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
