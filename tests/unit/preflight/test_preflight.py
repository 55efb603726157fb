"""`presdep preflight`: the env pins against what is installed, the node's memory against the
plan, one real micro-job per GPU rule family on the tiny config, and a rates file that
`presdep plan --rates` prices the bill at."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from presdep.preflight.cli import profile_resources
from presdep.preflight.stack import check_envs, env_pins, stack_report

REPO = Path(__file__).resolve().parents[3]
PRESDEP = Path(sys.executable).with_name("presdep")
TINY = REPO / "tests" / "configs" / "tiny-default.yaml"
BASE = REPO / "workflow_config.yaml"


def test_the_stack_check_names_missing_and_mismatched_packages(tmp_path):
    numpy = metadata.version("numpy")
    (tmp_path / "gpu.yaml").write_text(
        "name: x\ndependencies:\n  - python=3.11\n  - pip\n  - pip:\n"
        f"      - numpy=={numpy}\n      - pyyaml==0.0.1\n      - no-such-package-presdep==1.0\n"
        "      - --extra-index-url https://example.invalid\n")
    assert env_pins(tmp_path / "gpu.yaml") == {"numpy": numpy, "pyyaml": "0.0.1", "no-such-package-presdep": "1.0"}
    rows = {r.package: r for r in check_envs(tmp_path)["gpu.yaml"]}
    assert rows["numpy"].ok and not rows["pyyaml"].ok and rows["no-such-package-presdep"].installed is None
    report = "\n".join(stack_report(check_envs(tmp_path)))
    assert "2 of 3 pinned packages missing or mismatched" in report
    assert f"pyyaml {metadata.version('pyyaml')} installed, pinned 0.0.1" in report
    assert "no-such-package-presdep missing (pinned 1.0)" in report and "numpy" not in report


def test_the_profiles_training_resources_become_the_preflight_jobs_and_snakemake_parses_them(tmp_path):
    from snakemake.cli import parse_set_resources

    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "config.yaml").write_text(
        "set-resources:\n  train_student:\n    slurm_partition: gpu\n    gpu: 1\n"
        "    slurm_extra: \"--gpus=h100:1 --qos=long\"\n    runtime: 720\n")
    args = profile_resources([str(tmp_path / "site")])
    parsed = {k: ast.literal_eval(r.raw) if r.is_evaluable() else r.value
              for k, r in parse_set_resources(args)["preflight"].items()}
    assert parsed == {"slurm_partition": "gpu", "gpu": 1, "slurm_extra": "--gpus=h100:1 --qos=long", "runtime": 720}


def test_a_job_that_cannot_fit_the_node_stops_the_preflight_naming_it(tmp_path):
    proc = subprocess.run([str(PRESDEP), "preflight", "--local", "--configfile", str(REPO / "configs" / "paper.yaml"),
                           "--base", str(BASE), "--gpu-mem-gb", "10", "--resources", str(tmp_path / "none"),
                           "--out", str(tmp_path / "rates.json")],
                          cwd=REPO, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "oc_sft_rerank__lambda0.5/seed42 does not fit this node" in proc.stderr
    assert not (tmp_path / "rates.json").exists()  # no micro-job ran


@pytest.fixture(scope="module")
def preflight_run(tmp_path_factory, smollm2_model_dir):
    """The preflight on the tiny config, its models a tiny random Llama over SmolLM2's tokenizer."""
    from scorers_tiny import saved_tiny_llama

    work = tmp_path_factory.mktemp("preflight")
    saved_tiny_llama(smollm2_model_dir, work / "resources" / "models" / "smollm2")
    out = work / "rates.json"
    proc = subprocess.run([str(PRESDEP), "preflight", "--local", "--configfile", str(TINY), "--base", str(BASE),
                           "--resources", str(work / "resources"), "--results", str(work / "results"),
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True, check=False, timeout=600)
    return work, out, proc


def test_the_preflight_runs_each_gpu_family_and_writes_rates_plan_accepts(preflight_run):
    work, out, proc = preflight_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads(out.read_text())
    jobs = {j["family"]: j for j in record["preflight"]["micro_jobs"]}
    assert set(jobs) == {"score", "train", "reader"} and record["preflight"]["failed"] == {}
    assert jobs["score"]["prompt_tokens"] > 0 and jobs["train"]["prompts"] >= 2
    assert len(jobs["train"]["detail"]["step_seconds"]) == 2
    rates = record["rates"]
    assert rates["readout_slot_tokens_per_s"] > 0 and rates["train_tokens_per_s"] > 0
    assert rates["device"].startswith("CPU")
    # Every pinned env is reported; this venv has no vLLM, so the inference env is not matched.
    assert "gpu.yaml: vllm missing (pinned" in proc.stdout
    assert "GPU-hours per stage, at the assumed rates and at the rates measured" in proc.stdout
    plan = subprocess.run([str(PRESDEP), "plan", "--configfile", str(REPO / "configs" / "paper.yaml"), "--base",
                           str(BASE), "--rates", str(out), "--gpu-mem-gb", "80", "--resources", "no-such-folder"],
                          cwd=REPO, capture_output=True, text=True, check=False, timeout=300)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert f"measured: {out}" in plan.stdout


def test_a_measured_rate_read_back_for_its_own_model_is_the_rate_measured(preflight_run):
    from presdep.report.plan import load_config, model_shape
    from presdep.report.plan_rates import load_rates

    work, out, proc = preflight_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(out.read_text())
    cfg = load_config([TINY], base=BASE)
    shape, _ = model_shape(cfg, "smollm2", work / "resources")
    score = next(j for j in record["preflight"]["micro_jobs"] if j["family"] == "score")
    length = score["prompt_tokens"] / score["prompts"]
    rate, source = load_rates(out).readout("slot", shape, length)
    assert rate == pytest.approx(score["tokens_per_s"], rel=1e-9) and "measured" in source
