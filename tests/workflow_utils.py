"""Run the real workflow in a scratch copy of the repository (so results/ stays clean)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_PARTS = ("Snakefile", "rules", "scripts", "workflow_config.yaml", "configs", "profiles", "envs")


def silver_only_config(*, seed: int, entities: int, candidates: int, train: int, extra: str) -> str:
    """A config whose one dataset is a synthetic training split (for silver-label jobs alone):
    ``extra`` adds the models and teachers."""
    return f"""
synthetic:
  synthetic: {{seed: {seed}, entities: {entities}, candidates: {candidates}, queries: {{train: {train}, heldout: 1, test: 1}}}}
synthetic_tasks: {{}}
datasets:
  synthetic_train:
    task: rerank
    role: train
    candidates: {{format: rank_llm_json, path: resources/datasets/synthetic/train/candidates.json}}
    qrels: {{format: trec, path: resources/datasets/synthetic/train/qrels.txt}}
variants:
  bm25: {{label: First stage, scorer: identity}}
{extra}"""


# One tiny synthetic reranking collection (3 test queries, 5 candidates, M = 2): a config that
# runs a scorer of its own appends its ``variants:`` and ``figure1:``.
TINY_RERANK_CONFIG = """
synthetic:
  synthetic: {seed: 13, entities: 20, candidates: 5, queries: {train: 1, heldout: 1, test: 3}}
synthetic_tasks: {}
protocol: {M: 2, B: {rerank: 5}}
datasets:
  synthetic:
    task: rerank
    candidates: {format: rank_llm_json, path: resources/datasets/synthetic/test/candidates.json}
    qrels: {format: trec, path: resources/datasets/synthetic/test/qrels.txt}
"""


def scratch_workflow(tmp_path: Path, shared_data: Path | None = None) -> Path:
    """A copy of the workflow files; ``../shared/data`` inside it points at the real data."""
    work = tmp_path / "repo"
    work.mkdir()
    for part in WORKFLOW_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, work / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, work / part)
    if shared_data is not None:
        (tmp_path / "shared").mkdir()
        (tmp_path / "shared" / "data").symlink_to(shared_data)
    return work


TINY_DEFAULT = "tiny-default.yaml"


def tiny_default_workflow(root: Path, smollm2_model_dir: Path) -> Path:
    """A scratch workflow with tests/configs/tiny-default.yaml and the converted SmolLM2 in place."""
    work = scratch_workflow(root)
    (work / TINY_DEFAULT).write_text((REPO / "tests" / "configs" / TINY_DEFAULT).read_text())
    # The model conversion is its own rule; reuse the converted directory instead of
    # fetching the wheel again (the rule's output exists, so Snakemake keeps it).
    (work / "resources" / "models").mkdir(parents=True)
    (work / "resources" / "models" / "smollm2").symlink_to(smollm2_model_dir)
    return work


def snakemake(work: Path, *args: str, timeout: int = 900, check: bool = True) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("snakemake")
    env = dict(os.environ)
    env["PATH"] = f"{exe.parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(
        [str(exe), *args], cwd=work, env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


def planned_jobs(dry_run_output: str) -> dict[str, int]:
    """Parse the 'Job stats' table of a dry run into {rule: count}."""
    jobs: dict[str, int] = {}
    lines = dry_run_output.splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.startswith("Job stats")) + 3
    except StopIteration:
        return jobs
    for line in lines[start:]:
        parts = line.split()
        if len(parts) != 2 or parts[0] == "total":
            break
        jobs[parts[0]] = int(parts[1])
    return jobs
