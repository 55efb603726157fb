"""benchmarks/gpu.py: the tiny shape on the CPU (the smoke run) gives every part's figures (the
slot-only readout and the two emulated vLLM readouts beside it, the bf16 head against float32 grade
rows, random-weight labels, allocated and reserved peaks, LoRA settings with float32 and bf16
adapters timed over two steps, the rates block that ``presdep plan --rates`` reads), in the budget's
cheapest-first order; it runs where only a stock GPU image's packages are (polars, jsonschema and the
workflow's tools hidden); its tau-PSI discordance agrees with scipy's Kendall tau and with presdep's
own tau-PSI on untied scores."""

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
# What presdep plan --rates reads: exactly these keys.
RATE_KEYS = {"device", "readout_slot_tokens_per_s", "readout_full_vocab_tokens_per_s",
             "readout_grade_rows_tokens_per_s", "train_tokens_per_s", "matmul_bf16_flops_per_s"}
READOUT_ROWS = ("slot_only", "full_vocab_per_position", "grade_rows_per_position")
PARTS = ("precision", "grade_logits", "score_job", "noise", "readout", "lora")  # cheapest first
# (checkpointing, padding mask, adapter weights, dropout) of the LoRA settings, in run order
LORA_SETTINGS = [(True, False, "float32", 0.05), (True, False, "bfloat16", 0.0), (False, False, "float32", 0.05),
                 (True, True, "float32", 0.05), (True, False, "float32 + autocast", 0.0)]
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
    assert set(r["parts"]) == set(PARTS) and not any("partial" in p for p in r["parts"].values())
    assert r["skipped"] == {}
    assert all(_finite_pos(s) for s in r["elapsed_s_per_part"].values())
    assert tuple(r["elapsed_s_per_part"]) == PARTS == tuple(r["budget"]["order"])  # the order they ran in
    env = r["environment"]
    assert env["torch"] and env["transformers"] and env["device"] == "cpu"
    assert r["shape"]["layers"] == 2 and r["shape"]["B"] == 20 and r["model_class"] == "Qwen3ForCausalLM"
    assert "figures written to" in stdout and "readout: " in stdout and "grade_logits: " in stdout


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
    # The FLOP count is the documented formula, from presdep.runtime.flops (one place for it).
    from presdep.runtime import flops

    p, layers, d_attn = ro["params"]["non_embedding"], tiny_run[0]["shape"]["layers"], ro["d_attn"]
    assert d_attn == 64 and p == ro["params"]["total"] - ro["params"]["embedding"]
    mod = _load_module()
    assert mod.sequence_flops is flops.sequence_flops and ro["flops_formula"] == flops.FLOPS_FORMULA
    assert mod.sequence_flops(200, p, layers, d_attn) == 2 * p * 200 + 2 * layers * 200**2 * d_attn


def test_emulated_readout_rows_beside_slot_only(tiny_run):
    ro = tiny_run[0]["parts"]["readout"]
    assert set(ro["rows"]) == set(READOUT_ROWS) and ro["top_k"] == 20
    assert [ro["rows"][n]["emulation"] for n in READOUT_ROWS] == [False, True, True]
    assert "prompt_logprobs=20" in ro["rows"]["full_vocab_per_position"]["emulates"]
    assert "pooling" in ro["rows"]["grade_rows_per_position"]["emulates"]
    for b in ro["batch_sizes"]:
        rows = b["rows"]
        assert set(rows) == set(READOUT_ROWS)
        for name in READOUT_ROWS:
            r = rows[name]
            assert not r["oom"] and r["emulation"] == (name != "slot_only")
            for key in ("tokens_per_s", "tokens_per_s_device", "tokens_per_s_serial", "ratio_to_slot_only"):
                assert _finite_pos(r[key]), (b["batch_size"], name, key, r[key])
            assert len(r["seconds_device"]) == len(r["seconds_host"]) == ro["repeats"]
        assert rows["slot_only"]["tokens_per_s"] == b["tokens_per_s_readout"]
        assert rows["slot_only"]["ratio_to_slot_only"] == 1.0
        fv = rows["full_vocab_per_position"]
        # device and host apart; the row's rate is the lower of the two
        assert _finite_pos(fv["tokens_per_s_host"])
        assert fv["tokens_per_s"] == min(fv["tokens_per_s_device"], fv["tokens_per_s_host"])
        assert fv["ratio_to_slot_only"] == pytest.approx(fv["tokens_per_s"] / b["tokens_per_s_readout"])
        # every position with a next token, 20 top entries plus the next token (20 where it is among them)
        assert fv["positions"] == b["tokens"] - b["prompts"] and 20 < fv["dict_entries_per_position"] <= 21
        # the grade rows at every position, picked on the host: the slot-only readout's probabilities
        assert rows["grade_rows_per_position"]["max_abs_delta_p_vs_slot_only"] < 1e-5


def test_position_logprob_dicts_as_vllm_holds_them():
    _load_module()  # puts the benchmark's folder on sys.path
    from gpu_common import SyntheticPrompts
    from gpu_readout import position_logprob_dicts

    prompts = SyntheticPrompts(512, 2, 2, 3, np.random.default_rng(0)).pool(2, 9, 12)
    n = sum(len(p.ids) - 1 for p in prompts)
    top_ids = np.tile(np.arange(100, 120), (n, 1))
    top_lp = -np.tile(np.arange(20.0), (n, 1))
    nxt = np.array([7] * (n - 1) + [105])  # the last position's next token is among its top 20
    out = position_logprob_dicts(top_ids, top_lp, nxt, np.full(n, -30.0), prompts)
    assert [len(per) for per in out] == [len(p.ids) for p in prompts]
    assert all(per[0] is None for per in out)
    first = out[0][1]
    assert len(first) == 21 and first[7] == -30.0 and first[100] == 0.0 and first[119] == -19.0
    assert len(out[-1][-1]) == 20 and out[-1][-1][105] == -5.0


def test_rates_block(tiny_run):
    r = tiny_run[0]
    rates, src = r["rates"], r["rates_from"]
    assert set(rates) == RATE_KEYS and rates["device"] == "cpu"
    ro = r["parts"]["readout"]
    best = max(ro["batch_sizes"], key=lambda b: b["tokens_per_s_readout"])
    assert src["readout_batch_size"] == best["batch_size"]
    assert rates["readout_slot_tokens_per_s"] == best["tokens_per_s_readout"]
    assert rates["readout_full_vocab_tokens_per_s"] == best["rows"]["full_vocab_per_position"]["tokens_per_s"]
    assert rates["readout_grade_rows_tokens_per_s"] == best["rows"]["grade_rows_per_position"]["tokens_per_s"]
    lo = r["parts"]["lora"]["settings"]
    assert rates["train_tokens_per_s"] == lo[0]["tokens_per_s"] and (lo[0]["gradient_checkpointing"],
                                                                     lo[0]["padding_mask"]) == (True, False)
    assert all(_finite_pos(rates[k]) for k in RATE_KEYS - {"device", "matmul_bf16_flops_per_s"})
    # the tiny CPU run's matmul is float32: no bf16 rate to hand the plan
    assert ro["matmul"]["dtype"] == "float32" and rates["matmul_bf16_flops_per_s"] is None
    assert "rates" in tiny_run[1]


def test_rates_fall_back_and_stay_null():
    """An OOM'd emulated row at the best batch size is null; training falls back to the masked row."""
    mod = _load_module()
    ok = {"oom": False, "tokens_per_s": 5.0}
    readout = {"matmul": {"dtype": "bfloat16", "best_flops_per_s": 7e14}, "batch_sizes": [
        {"batch_size": 1, "oom": False, "tokens_per_s_readout": 10.0,
         "rows": {"full_vocab_per_position": ok, "grade_rows_per_position": ok}},
        {"batch_size": 8, "oom": False, "tokens_per_s_readout": 30.0,
         "rows": {"full_vocab_per_position": {"oom": True, "error": "out of memory"},
                  "grade_rows_per_position": {"oom": False, "tokens_per_s": 25.0}}},
        {"batch_size": 32, "oom": True}]}
    lora = {"settings": [{"gradient_checkpointing": True, "padding_mask": False, "oom": True},
                         {"gradient_checkpointing": True, "padding_mask": True, "tokens_per_s": 3.0,
                          "micro_batches": 2},
                         {"gradient_checkpointing": False, "padding_mask": False, "tokens_per_s": 9.0,
                          "micro_batches": 4}]}
    env = {"device": "cuda", "device_name": "NVIDIA H200"}
    rates, src = mod.rates({"environment": env, "parts": {"readout": readout, "lora": lora}})
    assert rates == {"device": "NVIDIA H200", "readout_slot_tokens_per_s": 30.0,
                     "readout_full_vocab_tokens_per_s": None, "readout_grade_rows_tokens_per_s": 25.0,
                     "train_tokens_per_s": 3.0, "matmul_bf16_flops_per_s": 7e14}
    assert src["train"]["padding_mask"] is True and src["readout_batch_size"] == 8
    none, _ = mod.rates({"environment": env, "parts": {"readout": {"skipped": "budget"}}})
    assert none == dict.fromkeys(RATE_KEYS) | {"device": "NVIDIA H200"}


def test_precision_and_noise_floor(tiny_run):
    parts = tiny_run[0]["parts"]
    pr = parts["precision"]
    for key in ("mean_abs_delta_eg", "max_abs_delta_eg", "max_abs_delta_p"):
        assert math.isfinite(pr[key]) and pr[key] >= 0
    assert pr["max_abs_delta_eg"] >= pr["mean_abs_delta_eg"] and pr["slots"] == 2 * 20
    no = parts["noise"]
    # random weights: kernel-level figures, and the JSON says so
    for part in (pr, no):
        assert part["weights"] == "random" and "random weights" in part["meaning"]
        assert "not a trained Qwen3-4B" in part["meaning"]
    assert "RANDOM WEIGHTS" in tiny_run[1]
    # the tiny run's noise batch is its shape's; the full run's is the paper's 16
    assert no["batch_size"] == tiny_run[0]["shape"]["noise_batch"] == 4
    mod = _load_module()
    assert mod.FULL["noise_batch"] == 16 and mod.TINY["noise_batch"] <= 4
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
    assert [(s["gradient_checkpointing"], s["padding_mask"], s["adapter_weights"], s["dropout"])
            for s in lo["settings"]] == LORA_SETTINGS
    for s in lo["settings"]:
        assert s["fits"] and not s["oom"] and _finite_pos(s["seconds_per_step"]) and _finite_pos(s["tokens_per_s"])
        assert s["adapter_param_dtype"] == ("bfloat16" if s["adapter_weights"] == "bfloat16" else "float32")
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
    assert set(r["rates"]) == RATE_KEYS and _finite_pos(r["rates"]["readout_full_vocab_tokens_per_s"])


def test_seconds_budget_stops_at_a_part_boundary(tmp_path):
    out = tmp_path / "gpu.json"
    r = _load_module().main(["--device", "cpu", "--tiny", "--budget-s", "0", "--out", str(out)])
    assert json.loads(out.read_text())["skipped"] == r["skipped"]
    assert set(r["skipped"]) == set(PARTS) and r["seconds_budget"] == r["budget"]["seconds"] == 0
    assert all("seconds budget" in why for why in r["skipped"].values())
    assert r["rates"] == dict.fromkeys(RATE_KEYS) | {"device": "cpu"}  # null: no part ran


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


def test_allocated_and_reserved_peaks_per_setting(tiny_run):
    """Every readout row and LoRA setting records both peaks (null off CUDA)."""
    parts = tiny_run[0]["parts"]
    for b in parts["readout"]["batch_sizes"]:
        for key in ("peak_memory_gib_readout", "peak_memory_gib_bare", "peak_reserved_gib_readout",
                    "peak_reserved_gib_bare"):
            assert key in b and b[key] is None
        assert all(r["peak_memory_gib"] is None and r["peak_reserved_gib"] is None for r in b["rows"].values())
    for s in parts["lora"]["settings"]:
        assert s["peak_memory_gib"] is None and s["peak_reserved_gib"] is None
        assert s["measured_over_predicted"] is None and s["reserved_over_predicted"] is None
    assert "max_memory_reserved" in parts["lora"]["memory"] and "max_memory_reserved" in parts["readout"]["memory"]


def test_lora_settings_time_two_steps(tiny_run):
    lo = tiny_run[0]["parts"]["lora"]
    assert lo["steps_per_setting"] == 2
    for s in lo["settings"]:
        times = s["seconds_per_step_all"]
        assert len(times) == 2 and all(_finite_pos(t) for t in times)
        assert (s["seconds_first_step"], s["seconds_last_step"]) == (times[0], times[1])
        assert s["seconds_per_step"] == pytest.approx(sum(times) / 2)
        assert s["tokens_per_s"] == pytest.approx(lo["tokens_per_step"] / times[1])  # the step after the warm-up
        assert s["tokens_per_s_mean"] == pytest.approx(lo["tokens_per_step"] / s["seconds_per_step"])
    bf16 = lo["settings"][1]
    assert (bf16["adapter_dtype"], bf16["adapter_param_dtype"], bf16["dropout"]) == ("bfloat16", "bfloat16", 0.0)


def test_set_adapters_casts_and_drops_dropout():
    import torch

    mod = _load_module()
    from gpu_common import build_model
    from gpu_training import LORA_TARGETS, set_adapters

    from presdep.training.lora import add_lora

    model = build_model(mod.TINY, torch.device("cpu"), torch.float32, 0)
    peft_model = add_lora(model, {"r": 4, "alpha": 8, "dropout": 0.05, "target_modules": LORA_TARGETS}, seed=1)

    def state():
        drops = [type(d).__name__ for m in peft_model.modules()
                 if isinstance(getattr(m, "lora_dropout", None), torch.nn.ModuleDict) for d in m.lora_dropout.values()]
        dtypes = {p.dtype for p in peft_model.parameters() if p.requires_grad}
        return set(drops), dtypes

    assert state() == ({"Dropout"}, {torch.float32})
    set_adapters(peft_model, torch.bfloat16, 0.0)
    assert state() == ({"Identity"}, {torch.bfloat16})  # as LoraConfig(lora_dropout=0) builds it
    assert all(p.dtype == torch.float32 for n, p in peft_model.named_parameters() if "lora_" not in n)
    set_adapters(peft_model, torch.float32, 0.05)
    assert state() == ({"Dropout"}, {torch.float32})


def test_grade_logits_bf16_head_against_fp32_rows(tiny_run):
    gl = tiny_run[0]["parts"]["grade_logits"]
    assert gl["weights"] == "random" and gl["slots"] == gl["prompts"] * 20 == 80
    # the bf16 head rounds each logit: a difference, and small against the logits
    assert 0 < gl["max_abs_logit_diff"] < 0.01 * max(1.0, gl["max_abs_logit"])
    assert 0 < gl["max_abs_eg_diff"] < 0.05 and gl["mean_abs_eg_diff"] <= gl["max_abs_eg_diff"]
    for key in ("tied_fraction_bf16_head", "tied_fraction_fp32_rows", "mean_discordance"):
        assert 0.0 <= gl[key] <= 1.0
    assert gl["tied_fraction_fp32_rows"] == 0.0  # float32 rows of a random model: no two slots alike
    assert set(gl["shifted_logits"]) == {"16", "32"}
    # at a larger magnitude bf16 steps are coarser: more ties, a larger E[g] error
    s16, s32 = gl["shifted_logits"]["16"], gl["shifted_logits"]["32"]
    assert s32["max_abs_logit_diff"] >= s16["max_abs_logit_diff"] > gl["max_abs_logit_diff"]
    assert s32["tied_fraction_bf16_head"] >= s16["tied_fraction_bf16_head"]


def test_tied_fraction_and_compare():
    _load_module()
    from gpu_logits import compare, tied_fraction

    assert tied_fraction(np.array([1.0, 1.0, 2.0, 3.0])) == 0.5
    assert tied_fraction(np.array([1.0, 2.0, 3.0])) == 0.0 and tied_fraction(np.zeros(4)) == 1.0
    a = np.array([[0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0], [3.0, 2.0, 1.0, 0.0]])
    b = a + np.array([[0.0, 0.0, 0.0, 0.5], [0.0] * 4, [0.0] * 4])
    out = compare([a], [b])
    assert out["max_abs_logit_diff"] == 0.5 and out["max_abs_eg_diff"] > 0
    assert out["tied_fraction_bf16_head"] == 2 / 3 and out["tied_fraction_fp32_rows"] == 0.0


def test_parts_run_cheapest_first_and_lora_last():
    mod = _load_module()
    assert mod.PART_ORDER == PARTS and mod.PART_ORDER[-1] == "lora"
    costs = [mod.PART_COST_S[k] for k in mod.PART_ORDER]
    assert costs == sorted(costs)
    # the H200 run's parts before score_job cost far less than the default budget
    assert sum(costs[: PARTS.index("score_job") + 1]) < 60 and sum(costs) < 540
    assert mod.skip_reason("noise", 100.0, 1.0) is None and mod.skip_reason("lora", 61.0, 1.0) is None
    assert "estimated 60 s" in mod.skip_reason("lora", 59.0, 1.0)
    assert "spent" in mod.skip_reason("precision", -1.0, 0.0) and mod.skip_reason("readout", 0.5, 0.0) is None


def test_budget_skips_what_its_estimate_does_not_fit(tmp_path, monkeypatch):
    """Full-shape estimates on the tiny model with 12 s: the two cheapest parts run, the rest are skipped
    with the reason, each skip on disk; the old flag name still works."""
    mod = _load_module()
    monkeypatch.setitem(mod.TINY, "cost_scale", 1.0)
    out = tmp_path / "gpu.json"
    r = mod.main(["--device", "cpu", "--tiny", "--threads", "1", "--seconds-budget", "12", "--out", str(out)])
    assert r["budget"]["seconds"] == 12 and r["budget"]["estimated_s"] == mod.PART_COST_S
    assert list(r["elapsed_s_per_part"]) == ["precision", "grade_logits"]
    assert set(r["skipped"]) == {"score_job", "noise", "readout", "lora"}
    for name, why in r["skipped"].items():
        assert "seconds budget" in why and "estimated" in why and r["parts"][name] == {"skipped": why}
    assert json.loads(out.read_text())["skipped"] == r["skipped"]


def test_divisible_parts_run_their_first_piece_then_stop_at_the_deadline():
    """Past the deadline readout still measures its first batch size and lora its first setting (the
    part was started because that fitted); the rest are skipped; each finished piece is handed on."""
    import argparse

    import torch

    mod = _load_module()
    from gpu_common import SyntheticPrompts, build_model
    from gpu_readout import part_readout
    from gpu_training import part_training

    shape, device = dict(mod.TINY, pool=4, lora_chunks=2), torch.device("cpu")
    rng = np.random.default_rng(0)
    model = build_model(shape, device, torch.float32, 0)
    synth = SyntheticPrompts(shape["vocab"], shape["B"], shape["prefix"], shape["header"], rng)
    pool = synth.pool(shape["pool"], shape["len_lo"], shape["len_hi"])
    args = argparse.Namespace(batch_sizes=[1, 2], repeats=1, lora_steps=2)
    seen: list = []
    ro = part_readout(model, synth, pool, shape, args, device, 0.0, lambda p: seen.append(len(p["batch_sizes"])))
    assert [b["batch_size"] for b in ro["batch_sizes"]] == [1] and ro["skipped_batch_sizes"] == [2] and seen == [1]
    lo = part_training(model, synth, shape, args, device, rng, 0.0, lambda p: seen.append(len(p["settings"])))
    assert "tokens_per_s" in lo["settings"][0] and len(lo["settings"]) == len(LORA_SETTINGS)
    assert all("seconds budget" in s["skipped"] for s in lo["settings"][1:]) and seen == [1, 1]
