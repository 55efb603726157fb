"""Checkpoint and lambda selection on hand-worked held-out curves (METHODS.md, "Training")."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest

from presdep.contracts.errors import SchemaError
from presdep.contracts.json_artifacts import DIGEST_FIELD, write_json_artifact
from presdep.contracts.schemas import REBUILD_HINT
from presdep.contracts.selection import adapter_for
from presdep.training.select import SelectionAbstained, read_run, select_lambda, select_lambda_files


def fake_run(root: Path, lam: float, seed: int, curve: dict[int, list[float]], std: dict[int, float] | None = None):
    """A finished run: per evaluation step the per-query nDCG@10 and the score spread (default 1.0)."""
    d = root / f"l{lam}-s{seed}"
    rows = []
    for step, vals in curve.items():
        (d / "checkpoints" / f"step{step:06d}" / "adapter").mkdir(parents=True, exist_ok=True)
        (d / "checkpoints" / f"step{step:06d}" / "adapter" / "adapter_config.json").write_text("{}")
        rows += [{"step": step, "query_id": f"q{i}", "ndcg10": v} for i, v in enumerate(vals)]
    pl.DataFrame(rows).write_parquet(d / "heldout.parquet")
    spread = {str(s): (std or {}).get(s, 1.0) for s in curve}
    (d / "done.json").write_text(json.dumps({"heldout_score_std": spread}))
    return {"lambda": lam, "seed": seed, "dir": str(d)}


def adapter(run, step):
    return str(Path(run["dir"]) / "checkpoints" / f"step{step:06d}" / "adapter")


def test_checkpoint_rule_argmax_with_exact_ties_to_the_earliest_step(tmp_path):
    r1 = fake_run(tmp_path, 0.0, 42, {10: [0.5, 0.7], 20: [0.7, 0.5], 30: [0.2, 0.2]})  # means .6, .6, .2
    r2 = fake_run(tmp_path, 0.0, 43, {10: [0.1, 0.1], 20: [0.3, 0.5], 30: [0.4, 0.4]})  # .1, .4, .4
    rec = select_lambda([r1, r2], rule="checkpoint")
    assert rec["per_seed"]["42"]["step"] == 10 and rec["per_seed"]["43"]["step"] == 20
    assert rec["adapters"] == {"42": adapter(r1, 10), "43": adapter(r2, 20)}
    assert rec["rule"] == "checkpoint" and rec["test_data_used"] is False
    with pytest.raises(ValueError, match="one lambda"):
        select_lambda([r1, fake_run(tmp_path, 1.0, 42, {10: [0.5]})], rule="checkpoint")


def _grid(root, curves, seed=42, std=None):
    return [fake_run(root, lam, seed, c, (std or {}).get(lam)) for lam, c in curves.items()]


def test_one_se_rule_by_hand(tmp_path):
    runs = _grid(tmp_path, {
        # converged from step 20: step 10 (0.95) does not count
        0.5: {10: [0.95, 0.95], 20: [0.5, 0.7], 30: [0.6, 0.8]},   # best converged .7 at 30, SE(.6,.8) = 0.1
        1.0: {10: [0.1, 0.1], 20: [0.62, 0.62], 30: [0.62, 0.62]},  # .62 at 20 (earliest tie): in the band (>= .6)
        2.0: {10: [0.1, 0.1], 20: [0.55, 0.55], 30: [0.59, 0.59]},  # .59 < .6: outside
        3.0: {10: [0.9, 0.9], 20: [0.9, 0.9], 30: [0.9, 0.9]},      # collapsed (score std 0.01 at step 10)
    }, std={3.0: {10: 0.01, 20: 0.5, 30: 0.5}})
    rec = select_lambda(runs, rule="one_se", converged_step=20, collapse_floor=0.05, task="rerank")
    dec = rec["decisions"]["42"]
    # the best value 0.7 is lambda 0.5's; band: 0.7 - 0.1 = 0.6 -> {0.5, 1.0}; lambda* = largest = 1.0 at step 20
    assert dec["argmax"]["lambda"] == 0.5 and dec["argmax"]["step"] == 30
    assert dec["argmax"]["se"] == pytest.approx(0.1) and dec["argmax"]["value"] == pytest.approx(0.7)
    assert dec["band"] == [0.5, 1.0] and dec["collapsed"] == [3.0] and dec["missing"] == []
    assert (dec["lambda"], dec["step"], dec["value"]) == (1.0, 20, pytest.approx(0.62))
    assert rec["per_seed"]["42"]["lambda"] == 1.0 and rec["lambda"] == 1.0
    assert rec["adapters"] == {"42": adapter(runs[1], 20)}
    # lambda* = 1.0 is inside the grid [0.5, 3]; 2 converged evaluations (< 3); best 0.7 >= 0.40
    assert dec["warnings"] == ["fewer than 3 converged evaluations"]
    assert rec["rule"] == "one_se" and rec["task"] == "rerank"


def test_one_se_warnings(tmp_path):
    runs = _grid(tmp_path, {
        1.0: {5: [0.30, 0.34], 6: [0.30, 0.34], 7: [0.30, 0.34]},  # .32, SE = .02
        2.0: {5: [0.31, 0.31], 6: [0.31, 0.31], 7: [0.31, 0.31]},  # .31 within .30
    })
    dec = select_lambda(runs, rule="one_se", converged_step=0, collapse_floor=0.05)["decisions"]["42"]
    assert dec["lambda"] == 2.0 and dec["step"] == 5
    assert dec["warnings"] == ["grid flatter than the band", "band spanning the whole grid",
                               "lambda* on the grid boundary", "best held-out quality below 0.40"]


def test_one_se_abstains(tmp_path):
    # two of three candidates collapsed: fewer than half usable
    runs = _grid(tmp_path / "a", {0.5: {1: [0.5], 2: [0.5]}, 1.0: {1: [0.6], 2: [0.6]}, 2.0: {1: [0.7], 2: [0.7]}},
                 std={1.0: {1: 0.0, 2: 0.3}, 2.0: {1: 0.3, 2: 0.01}})
    with pytest.raises(SelectionAbstained, match="1 of 3"):
        select_lambda(runs, rule="one_se", converged_step=0, collapse_floor=0.05)
    # lambda* has a single converged evaluation
    runs = _grid(tmp_path / "b", {0.5: {1: [0.5], 2: [0.5]}, 1.0: {1: [0.6], 2: [0.6], 3: [0.6]}})
    with pytest.raises(SelectionAbstained, match="fewer than 2"):
        select_lambda(runs, rule="one_se", converged_step=3, collapse_floor=0.05)
    # a candidate with no converged evaluation is missing; 1 of 2 usable is still half
    runs = _grid(tmp_path / "c", {0.5: {1: [0.5]}, 1.0: {2: [0.6], 3: [0.6]}})
    dec = select_lambda(runs, rule="one_se", converged_step=2, collapse_floor=0.05)["decisions"]["42"]
    assert dec["missing"] == [0.5] and dec["lambda"] == 1.0


def test_one_se_decides_per_seed(tmp_path):
    runs = (_grid(tmp_path / "s42", {1.0: {1: [0.9, 0.9], 2: [0.9, 0.9]}, 2.0: {1: [0.1, 0.1], 2: [0.1, 0.1]}}, seed=42)
            + _grid(tmp_path / "s43", {1.0: {1: [0.2, 0.2], 2: [0.2, 0.2]}, 2.0: {1: [0.8, 0.8], 2: [0.8, 0.8]}},
                    seed=43))
    rec = select_lambda(runs, rule="one_se", converged_step=0, collapse_floor=0.05)
    assert rec["per_seed"]["42"]["lambda"] == 1.0 and rec["per_seed"]["43"]["lambda"] == 2.0
    assert rec["lambda"] is None and set(rec["adapters"]) == {"42", "43"}


def test_seed_mean_rule(tmp_path):
    runs = [
        fake_run(tmp_path, 1.0, 42, {10: [0.6, 0.6], 20: [0.5, 0.5]}),  # best .6 @10
        fake_run(tmp_path, 1.0, 43, {10: [0.2, 0.2], 20: [0.3, 0.3]}),  # best .3 @20 -> mean .45
        fake_run(tmp_path, 3.0, 42, {10: [0.4, 0.4], 20: [0.4, 0.4]}),  # .4 @10 (earliest tie)
        fake_run(tmp_path, 3.0, 43, {10: [0.5, 0.5], 20: [0.1, 0.1]}),  # .5 @10 -> mean .45: tie -> larger lambda
        fake_run(tmp_path, 2.0, 42, {10: [0.3, 0.3]}),
        fake_run(tmp_path, 2.0, 43, {10: [0.3, 0.3]}),                  # mean .3
    ]
    rec = select_lambda(runs, rule="seed_mean", task="qa")
    assert rec["seed_means"] == {"1": pytest.approx(0.45), "2": pytest.approx(0.3), "3": pytest.approx(0.45)}
    assert rec["lambda"] == 3.0 and rec["per_seed"]["42"]["step"] == 10 and rec["per_seed"]["43"]["step"] == 10
    assert rec["adapters"] == {"42": adapter(runs[2], 10), "43": adapter(runs[3], 10)}


def test_fixed_rule(tmp_path):
    runs = [fake_run(tmp_path, 1.0, 42, {4: [0.2], 8: [0.3]}), fake_run(tmp_path, 2.0, 42, {4: [0.9], 8: [0.9]})]
    rec = select_lambda(runs, rule="fixed", fixed_lambda=1.0, task="response")
    assert rec["lambda"] == 1.0 and rec["per_seed"]["42"]["step"] == 8 and rec["adapters"]["42"] == adapter(runs[0], 8)
    with pytest.raises(ValueError, match="lambda_fixed"):
        select_lambda(runs, rule="fixed", fixed_lambda=5.0)


def test_selection_file_and_adapter_lookup(tmp_path):
    runs = [fake_run(tmp_path, 0.0, 42, {2: [0.4, 0.6]})]
    out = tmp_path / "selected.json"
    select_lambda_files(runs=runs, out_path=out, rule="checkpoint", task="rerank", params={"objective": "perm_aug"})
    rec = json.loads(out.read_text())
    assert rec["params"] == {"objective": "perm_aug"} and rec["rule_text"].startswith("per seed")
    assert adapter_for(out, 42) == adapter(runs[0], 2)
    with pytest.raises(KeyError, match="no adapter for seed 7"):
        adapter_for(out, 7)
    assert DIGEST_FIELD in rec  # written with its digest, verified by scoring's reader
    with pytest.raises(ValueError, match="unknown lambda rule"):
        select_lambda(runs, rule="best")
    assert math.isclose(rec["per_seed"]["42"]["heldout_ndcg10"], 0.5)


def test_an_edited_selection_is_refused_by_scoring(tmp_path):
    """Pointing a seed at another adapter by hand is refused: scoring would load the wrong student."""
    runs = [fake_run(tmp_path, 0.0, 42, {2: [0.4, 0.6], 4: [0.5, 0.5]})]
    out = tmp_path / "selected.json"
    select_lambda_files(runs=runs, out_path=out, rule="checkpoint", task="rerank")
    text = out.read_text()
    assert "step000002" in text
    out.write_text(text.replace("step000002", "step000004"))
    with pytest.raises(SchemaError) as err:
        adapter_for(out, 42)
    msg = str(err.value)
    assert str(out) in msg and "lambda selection" in msg and "edited by hand" in msg and REBUILD_HINT in msg
    out.write_bytes(b"\xff" + text.encode()[1:])
    with pytest.raises(SchemaError, match="not UTF-8"):
        adapter_for(out, 42)
    write_json_artifact(out, {"adapters": ["one", "two"]})  # verified, but not a selection
    with pytest.raises(SchemaError, match="'adapters' must map training seeds to adapter folders"):
        adapter_for(out, 42)


def test_a_run_record_is_verified_when_lambda_is_selected(tmp_path):
    run = fake_run(tmp_path, 0.0, 42, {2: [0.4, 0.6]})
    done = Path(run["dir"]) / "done.json"
    write_json_artifact(done, {"heldout_score_std": {"2": 0.5}})
    assert read_run(run["dir"]).score_std == {2: 0.5}
    done.write_text(done.read_text().replace("0.5", "0.9"))  # a spread edited past the collapse floor
    with pytest.raises(SchemaError) as err:
        read_run(run["dir"])
    assert str(done) in str(err.value) and "training run record" in str(err.value)
    done.write_text(json.dumps({"heldout_score_std": {"2": "wide"}}))  # an older file, no digest
    with pytest.raises(ValueError, match=r"done.json: heldout_score_std entry '2': 'wide' is not step -> number"):
        read_run(run["dir"])
