"""benchmarks/gpu.py: the tiny shape on the CPU gives every part's figures, and it runs where only a
stock GPU image's packages are (polars, jsonschema and the workflow's tools hidden); its tau-PSI
discordance agrees with scipy's Kendall tau and with presdep's own tau-PSI on untied scores."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "benchmarks" / "gpu.py"
# Installed here but not on a stock GPU image (or never needed by parts 1-4 there).
NOT_ON_GPU_IMAGE = ("polars", "jsonschema", "jsonschema_specifications", "referencing", "rpds", "snakemake", "vllm",
                    "pytrec_eval", "gguf")


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, f"exit {res.returncode}\nstdout:\n{res.stdout[-3000:]}\nstderr:\n{res.stderr[-3000:]}"
    return res


def _load_module():
    spec = importlib.util.spec_from_file_location("presdep_gpu_benchmark", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _finite_pos(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_bench") / "gpu.json"
    # One thread: the tiny model is too small to gain from more, and a busy 2-core machine makes
    # spinning worker threads slow.
    res = _run([sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--threads", "1", "--out", str(out)])
    return json.loads(out.read_text()), res.stdout


def test_tiny_run_has_every_part(tiny_run):
    r, stdout = tiny_run
    assert set(r["parts"]) == {"readout", "precision", "noise", "lora", "score_job"}
    assert r["skipped"] == {}
    assert all(_finite_pos(s) for s in r["elapsed_s_per_part"].values()) and len(r["elapsed_s_per_part"]) == 5
    env = r["environment"]
    assert env["torch"] and env["transformers"] and env["device"] == "cpu"
    assert r["shape"]["layers"] == 2 and r["shape"]["B"] == 20 and r["model_class"] == "Qwen3ForCausalLM"
    assert "figures written to" in stdout and "1. readout" in stdout


def test_readout_throughput_and_overhead(tiny_run):
    ro = tiny_run[0]["parts"]["readout"]
    assert [b["batch_size"] for b in ro["batch_sizes"]] == [1, 2, 4] and ro["skipped_batch_sizes"] == []
    assert _finite_pos(ro["matmul"]["best_flops_per_s"])
    assert "2 * N_nonembed * L" in ro["flops_formula"]
    assert 150 <= ro["prompt_tokens"]["min"] <= ro["prompt_tokens"]["max"] <= 260
    for b in ro["batch_sizes"]:
        assert not b["oom"]
        for key in ("tokens_per_s_readout", "tokens_per_s_bare", "overhead_ratio", "mfu_readout", "mfu_bare",
                    "model_flops"):
            assert _finite_pos(b[key]), (b["batch_size"], key, b[key])
        assert b["padded_tokens"] >= b["tokens"] and 0 <= b["padding_fraction"] < 1
        assert b["peak_memory_gib_readout"] is None  # CUDA only
    # The FLOP count is the documented formula.
    p, layers, d_attn = ro["params"]["non_embedding"], tiny_run[0]["shape"]["layers"], ro["d_attn"]
    assert d_attn == 64 and p == ro["params"]["total"] - ro["params"]["embedding"]
    mod = _load_module()
    assert mod.sequence_flops(200, p, layers, d_attn) == 2 * p * 200 + 2 * layers * 200**2 * d_attn


def test_precision_and_noise_floor(tiny_run):
    parts = tiny_run[0]["parts"]
    pr = parts["precision"]
    for key in ("mean_abs_delta_eg", "max_abs_delta_eg", "max_abs_delta_p"):
        assert math.isfinite(pr[key]) and pr[key] >= 0
    assert pr["max_abs_delta_eg"] >= pr["mean_abs_delta_eg"] and pr["slots"] == 2 * 20
    no = parts["noise"]
    # The same prompt read alone twice on the CPU: bit-identical.
    assert no["alone_vs_alone_max_abs"] == 0.0
    assert all(t["alone_vs_alone_max_abs"] == 0.0 for t in no["per_prompt"])
    for key in ("max_abs_delta_eg", "mean_abs_delta_eg"):
        assert math.isfinite(no[key]) and no[key] >= 0
    assert 0.0 <= no["tau_psi_mean"] <= no["tau_psi_max"] <= 1.0
    assert no["reads_per_prompt"] == 3 and len(no["per_prompt"]) == 2
    assert all(len(t["batch_positions"]) == 3 for t in no["per_prompt"])


def test_lora_step_and_score_job(tiny_run):
    parts = tiny_run[0]["parts"]
    lo = parts["lora"]
    assert lo["lora"]["r"] == 16 and lo["lora"]["alpha"] == 32 and len(lo["lora"]["target_modules"]) == 6
    assert lo["batch_chunks"] == 4 and lo["prompts_per_step"] == 8 and lo["objective"]["objective"] == "oc_sft"
    assert [(s["gradient_checkpointing"], s["padding_mask"]) for s in lo["settings"]] == [
        (True, False), (True, True), (False, False)]
    for s in lo["settings"]:
        assert s["fits"] and not s["oom"] and _finite_pos(s["seconds_per_step"]) and _finite_pos(s["tokens_per_s"])
        # the tiny run's device size makes the step split, as the memory model's budget cuts it
        assert s["micro_batches"] >= 2 and s["padded_tokens"] <= s["micro_batches"] * s["micro_batch_tokens"]
        assert _finite_pos(s["predicted_peak_gib"]) and s["peak_memory_gib"] is None  # measured on CUDA only
        assert s["sdpa_backend_probe"] in ("flash", "efficient", "math")
    # without checkpointing a token costs more, so the budget is smaller and the step splits further
    assert lo["settings"][2]["micro_batch_tokens"] < lo["settings"][0]["micro_batch_tokens"]
    sj = parts["score_job"]
    assert sj["rows"] > 0 and sj["scores_finite"]
    assert sj["dtype"] == sj["cache_identity"]["dtype"] in ("float32", "bfloat16")
    assert sj["cache_identity"]["device_type"] == "cpu" and sj["model_device"] == "cpu"


def test_runs_with_only_a_stock_gpu_image(tmp_path):
    """polars, jsonschema and the workflow's tools hidden: parts 1-4 run, part 5 says why it did not."""
    out = tmp_path / "gpu.json"
    code = ("import runpy, sys\n"
            f"for m in {NOT_ON_GPU_IMAGE!r}: sys.modules[m] = None\n"
            f"sys.argv = [{str(SCRIPT)!r}, '--device', 'cpu', '--tiny', '--threads', '1', '--batch-sizes', '1',"
            f" '--out', {str(out)!r}]\n"
            f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n")
    _run([sys.executable, "-c", code])
    r = json.loads(out.read_text())
    assert r["imports"] == {"polars": False}
    assert r["parts"]["score_job"] == {"skipped": "polars not installed"}
    assert r["skipped"] == {"score_job": "polars not installed"}
    assert _finite_pos(r["parts"]["readout"]["batch_sizes"][0]["tokens_per_s_readout"])
    assert r["parts"]["noise"]["alone_vs_alone_max_abs"] == 0.0
    assert all(not s["oom"] for s in r["parts"]["lora"]["settings"])


def test_seconds_budget_stops_at_a_part_boundary(tmp_path):
    out = tmp_path / "gpu.json"
    r = _load_module().main(["--device", "cpu", "--tiny", "--seconds-budget", "0", "--out", str(out)])
    assert json.loads(out.read_text())["skipped"] == r["skipped"]
    assert set(r["skipped"]) == {"readout", "precision", "noise", "lora", "score_job"}
    assert all("seconds budget" in why for why in r["skipped"].values())


def test_discordance_is_kendall_tau_untied():
    from scipy.stats import kendalltau

    mod = _load_module()
    rng = np.random.default_rng(5)
    for n in (2, 3, 7, 20):
        for _ in range(20):
            a, b = rng.normal(size=n), rng.normal(size=n)
            tau = kendalltau(a, b).statistic
            assert mod.kendall_discordance(a, b) == pytest.approx((1 - tau) / 2, abs=1e-12)
    a = np.arange(20.0)
    assert mod.kendall_discordance(a, a) == 0.0 and mod.kendall_discordance(a, -a) == 1.0
    # Ties: a pair tied in one read counts half, tied in both counts nothing.
    assert mod.kendall_discordance([1, 1, 2], [1, 2, 3]) == pytest.approx(0.5 / 3)
    assert mod.kendall_discordance([1, 1, 2], [5, 5, 6]) == 0.0
    with pytest.raises(ValueError):
        mod.kendall_discordance([1.0], [1.0])


def test_tau_psi_of_reads_matches_presdep_and_scipy():
    from scipy.stats import kendalltau

    from presdep.metrics.instability import tau_psi

    mod = _load_module()
    rng = np.random.default_rng(9)
    reads = rng.normal(size=(5, 20))
    want = np.mean([(1 - kendalltau(reads[i], reads[j]).statistic) / 2 for i in range(5) for j in range(i + 1, 5)])
    assert mod.tau_psi_of_reads(reads) == pytest.approx(want, abs=1e-12)
    assert mod.tau_psi_of_reads(reads) == pytest.approx(tau_psi(reads), abs=1e-12)
    assert mod.tau_psi_of_reads(np.stack([reads[0]] * 3)) == 0.0
    with pytest.raises(ValueError):
        mod.tau_psi_of_reads(reads[:1])
