"""`presdep plan`: the GPU memory a profile requests, each training job's budget and predicted
peak, and a non-zero exit when a job cannot fit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from presdep.config.records import TrainingSettings
from presdep.report.plan import GPU_MEMORY_GB, format_table, load_config, plan_training, profile_gpu
from presdep.training.memory_model import known_shape, predict_peak
from presdep.training.micro_batches import GIB, memory_settings

REPO = Path(__file__).resolve().parents[3]
PAPER = REPO / "configs" / "paper.yaml"
BASE = REPO / "workflow_config.yaml"
PRESDEP = Path(sys.executable).with_name("presdep")


@pytest.fixture(scope="module")
def paper():
    return load_config([PAPER], base=BASE)


def _profile(tmp_path: Path, resources: str) -> Path:
    folder = tmp_path / "site"
    folder.mkdir(exist_ok=True)
    (folder / "config.yaml").write_text(f"set-resources:\n  train_student:\n{resources}")
    return folder


@pytest.mark.parametrize("res, name", [("    gpu_model: h100\n", "h100"), ('    gres: "gpu:a100-40:1"\n', "a100-40"),
                                       ('    slurm_extra: "--gpus=h200:1 --qos=long"\n', "h200")])
def test_the_gpu_model_is_read_from_every_form_a_profile_uses(tmp_path, res, name):
    gib, source = profile_gpu([_profile(tmp_path, res)])
    assert gib == pytest.approx(GPU_MEMORY_GB[name] * 1e9 / GIB) and name in source


def test_an_unknown_gpu_model_is_an_error_naming_the_file(tmp_path):
    folder = _profile(tmp_path, "    gpu_model: z9000\n")
    with pytest.raises(ValueError, match=r"site/config.yaml.*z9000"):
        profile_gpu([folder])


def test_each_paper_job_is_planned_at_its_budget_within_the_gpu_less_the_margin(paper):
    plans = plan_training(paper, profiles=[REPO / "profiles" / "site-example"], resources="no-such-folder")
    n_jobs = sum(len(v.student.lambdas) * len(v.student.seeds) for v in paper.trained_variants.values())
    assert len(plans) == n_jobs == len({p.job for p in plans})
    shape = known_shape("Qwen/Qwen3-4B")
    for p in plans:
        assert p.fits and p.prompt_tokens == 8192
        s = TrainingSettings.from_dict(paper.student_run_settings(p.job.split("__lambda")[0],
                                                                  float(p.job.split("__lambda")[1].split("/")[0])))
        ms = memory_settings(s, checkpointing=True, masked=False, base_dtype="bfloat16")
        # the reported peak is the memory model's at the budget, and the budget is the largest that fits
        reads = p.prompts_per_micro_batch * paper.datasets[p.dataset].protocol.B
        at = predict_peak(shape, ms, tokens=p.micro_batch_tokens, prompts=p.prompts_per_micro_batch, read_rows=reads)
        assert at.gib == pytest.approx(p.predicted_peak_gib, abs=0.01) and at.gib <= 0.9 * p.gpu_gib + 1e-9
        over = predict_peak(shape, ms, tokens=int(p.micro_batch_tokens * 1.05), prompts=p.prompts_per_micro_batch,
                            read_rows=reads)
        assert over.gib > 0.9 * p.gpu_gib
    assert "oc_sft_rerank__lambda0.5/seed42" in format_table(plans)


def test_a_gpu_too_small_for_one_item_fails_the_plan_naming_the_job(paper):
    plans = plan_training(paper, gpu_mem_gb=10.0, resources="no-such-folder")
    oc = [p for p in plans if p.objective == "oc_sft"]
    assert oc and not any(p.fits for p in oc)
    assert "does not fit" in oc[0].why and "2 x 8192" in oc[0].why


def test_the_command_exits_1_and_names_a_job_that_cannot_fit():
    cmd = [str(PRESDEP), "plan", "--configfile", str(PAPER), "--base", str(BASE), "--gpu-mem-gb", "10"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 1
    assert "oc_sft_rerank__lambda0.5/seed42 does not fit" in proc.stderr
    ok = subprocess.run(cmd[:-2] + ["--gpu-mem-gb", "80", "--json"], cwd=REPO, capture_output=True, text=True,
                        check=False, timeout=300)
    assert ok.returncode == 0, ok.stderr[-2000:]
    job = json.loads(ok.stdout)["jobs"][0]
    assert {"rule", "job", "micro_batch_tokens", "predicted_peak_gib", "gpu_gib"} <= set(job)


def test_a_set_micro_batch_is_planned_as_set_and_cpu_students_need_no_gpu(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(PAPER.read_text().replace("batch_chunks: 32, train: msmarco-train",
                                             "batch_chunks: 32, micro_batch_tokens: 20000, train: msmarco-train"))
    plans = plan_training(load_config([cfg], base=BASE), gpu_mem_gb=80, resources="no-such-folder")
    rerank = [p for p in plans if p.dataset == "msmarco-train"]
    assert rerank and all(p.micro_batch_tokens == 20000 and p.prompts_per_micro_batch == 2 for p in rerank)
    default = plan_training(load_config([], base=BASE), resources="no-such-folder")
    assert default and all(p.gpu_gib is None and p.fits for p in default)


def test_without_a_named_gpu_the_plan_assumes_an_h100_and_says_so(paper):
    assumed = plan_training(paper, resources="no-such-folder")
    named = plan_training(paper, gpu_mem_gb=GPU_MEMORY_GB["h100"] * 1e9 / 2**30, resources="no-such-folder")
    assert assumed and all(p.gpu_source.startswith("assumed h100 (80 GB") for p in assumed)
    assert [(p.micro_batch_tokens, p.gpu_gib, p.fits) for p in assumed] == [
        (p.micro_batch_tokens, p.gpu_gib, p.fits) for p in named]
