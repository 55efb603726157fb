"""The rehearsal's machinery in CI: a slice of configs/paper.yaml read from loopback sources and run
through the local Slurm.

The slice is the paper's own config with the rehearsal overlay (configs/rehearsal.yaml) on top,
cut to one dataset per source kind (pyserini_prebuilt with its topics and qrels, hf_datasets,
url as a release zip, user_supplied as a BEIR folder, the ir_datasets topics of MS MARCO's
train pool), one training seed, and every scorer family of the paper's rows. The sources are built by `presdep rehearsal build`, served by the local hub (olah)
and the file server, and read by the unmodified clients; nothing of huggingface_hub, datasets or
pyserini is mocked. The run must execute every rule of the paper's plan; then a changed revision
in the pins re-plans only what depends on it, a sha256 mismatch fails its fetch naming the
dataset, the file and both digests, and a stopped hub fails a fetch clearly until restarted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from workflow_utils import REPO, planned_jobs, scratch_workflow

from presdep.config.yaml_io import load_yaml

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

OLAH = REPO / ".venv-hub" / "bin" / "olah-cli"
PRESDEP = Path(sys.executable).with_name("presdep")
# One dataset per source kind and task; each scorer family once; one student per pool kind.
SLICE_DATASETS = ("dl19", "climate-fever", "signal1m", "hotpotqa", "musique", "rewardbench2",
                  "msmarco-train", "msmarco-heldout", "hotpotqa-train", "hotpotqa-heldout")
SLICE_VARIANTS = ("off_the_shelf", "jina_reranker_v3", "rank_zephyr", "mxbai_rerank_base", "skywork_reward",
                  "pairrm", "single_order_rerank", "oc_sft_qa")
PROFILE = ("--profile", "profiles/slurm", "--profile", "profiles/slurm-rehearsal")
# The paper's decision programs beside Table 1 (the verdict reader on Climate-FEVER's claims).
DECISIONS = ("results/discordance.md", "results/contrasts.md", "results/matched_retention.md",
             "results/verdict_flip.md", "results/width.md", "results/context_decomposition.md",
             "results/render_perturbations.md")
RUN_TIMEOUT = 1500


def _merged(base, extra):
    if not (isinstance(base, dict) and isinstance(extra, dict)):
        return extra
    return {**base, **{k: _merged(base[k], v) if k in base else v for k, v in extra.items()}}


def _slice_config(work: Path) -> Path:
    """configs/paper.yaml + configs/rehearsal.yaml, cut to the slice (one seed)."""
    config = _merged(load_yaml(REPO / "configs" / "paper.yaml"), load_yaml(REPO / "configs" / "rehearsal.yaml"))
    config["datasets"] = {k: config["datasets"][k] for k in SLICE_DATASETS}
    # The width program on the slice's response collection: its B = 1 alias, as the paper's pairs.
    config["datasets"]["rewardbench2-b1"] = {"alias_of": "rewardbench2", "B": 1, "M": 1}
    config["width"]["pairs"] = {"rewardbench2": "rewardbench2-b1"}
    # The pool perturbation reads ArguAna's alias, which the slice leaves out (the whole rehearsal runs it).
    config["pool_perturbation"]["datasets"] = []
    config["variants"] = {k: config["variants"][k] for k in SLICE_VARIANTS}
    for variant in config["variants"].values():
        if "student" in variant:
            variant["student"]["seeds"] = [42]
    config["variants"]["oc_sft_qa"]["student"]["lambda"] = [1]  # one lambda: select_lambda still runs
    path = work / "slice.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _presdep(work: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(PRESDEP), "rehearsal", *args], cwd=work, capture_output=True, text=True, **kw)


def _client_env(work: Path, ports: tuple[str, ...], exe: Path) -> dict[str, str]:
    out = _presdep(work, *ports, "env", "--json", check=True)
    return {**os.environ, **json.loads(out.stdout), "PATH": f"{exe.parent}{os.pathsep}{os.environ.get('PATH', '')}"}


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """A scratch workflow with the rehearsal's sources built and both servers running."""
    if not OLAH.exists():
        pytest.skip(f"no hub server at {OLAH}: `make hub-env` installs it (make test does)")
    tmp = tmp_path_factory.mktemp("rehearsal")
    work = scratch_workflow(tmp)
    ports = ("--hub-port", str(_free_port()), "--files-port", str(_free_port()))
    build = _presdep(work, *ports, "build", timeout=900)
    assert build.returncode == 0, build.stderr[-4000:]
    start = _presdep(work, *ports, "start", "--olah", str(OLAH), timeout=120)
    assert start.returncode == 0, start.stderr[-3000:]
    try:
        yield work, ports
    finally:
        stop = _presdep(work, "stop", timeout=60)
        assert "hub" in stop.stdout and "files" in stop.stdout, stop.stdout + stop.stderr


def _manifests(work: Path) -> dict[str, dict]:
    root = work / "resources" / "datasets"
    found = {p.parent.name: p for p in root.glob("*/manifest.json")}
    found.update({p.parent.parent.name: p for p in root.glob("*/local-*/manifest.json")})  # local copies: keyed by source
    return {cid: json.loads(p.read_text()) for cid, p in found.items()}


FETCH_RULES = ("fetch_dataset", "fetch_dataset_qa", "fetch_dataset_beir", "fetch_model", "fetch_training_pool",
               "fetch_training_pool_qa")


def test_the_slice_runs_every_rule_of_the_paper_plan(rehearsal, local_slurm, slurm_snakemake):
    """Slurm runs the fetch stage (compute nodes reading the loopback sources) and a first model
    job (its GPU request scheduled on the node's fake GPUs); the rest runs locally, to keep the
    suite short: the whole plan through Slurm is `REHEARSAL_MODE=slurm make rehearsal`."""
    work, ports = rehearsal
    exe = slurm_snakemake
    env = _client_env(work, ports, exe)
    config = ("--configfile", str(_slice_config(work)), "resources/rehearsal/pins.yaml")
    started = time.monotonic()
    outs = []
    for extra in (("--until", *FETCH_RULES, "--", "results/table1.csv"),
                  ("--", "results/scores/off_the_shelf/dl19.parquet")):
        run = subprocess.run(["timeout", str(RUN_TIMEOUT), str(exe), *PROFILE, *config, *extra],
                             cwd=work, env=env, capture_output=True, text=True)
        outs.append(run.stdout + run.stderr)
        assert run.returncode == 0, outs[-1][-6000:]
    slurm_wall = time.monotonic() - started
    # Through Slurm: the fetch stage and the first model job, each a group job; the model job's
    # group asked for a (fake) GPU and Slurm granted it. Asked now, while scontrol still knows the
    # job (MinJobAge 300 s; without accounting, jobcomp records no GPUs).
    logs = work / ".snakemake" / "slurm_logs"
    submitted = {p.stem: p.relative_to(logs).parts[0] for p in logs.rglob("*.log") if p.stem.isdigit()}
    groups = sorted(submitted.values())
    assert any(g.startswith("group_fetch") for g in groups) and any(g.startswith("group_models") for g in groups), groups
    model_job = max((j for j, g in submitted.items() if g.startswith("group_models")), key=int)
    show = subprocess.run(["scontrol", "show", "job", model_job], capture_output=True, text=True).stdout
    assert "JobState=COMPLETED" in show and re.search(r"Tres\w*=\S*gres[:/]gpu[:=][1-9]", show), show
    local = subprocess.run(["timeout", str(RUN_TIMEOUT), str(Path(sys.executable).with_name("snakemake")),
                            "--cores", "2", *config, "--", "results/table1.csv", *DECISIONS], cwd=work, env=env,
                           capture_output=True, text=True)
    outs.append(local.stdout + local.stderr)
    assert local.returncode == 0, outs[-1][-6000:]
    wall = time.monotonic() - started
    ran: dict[str, int] = {}  # from each run's own log: its job stats, all of which ran (rc 0)
    for log in sorted((work / ".snakemake" / "log").glob("*.snakemake.log")):
        for rule, n in planned_jobs(log.read_text()).items():
            ran[rule] = ran.get(rule, 0) + n

    # Every rule the paper's own plan has ran here (the BEIR-folder path adds its index and retrieval).
    paper = subprocess.run([str(Path(sys.executable).with_name("snakemake")), "-n", "--configfile",
                            "configs/paper.yaml", "--", "results/table1.csv", *DECISIONS], cwd=work, capture_output=True,
                           text=True, timeout=300)
    assert paper.returncode == 0, paper.stderr[-3000:]
    missing = set(planned_jobs(paper.stdout + paper.stderr)) - set(ran)
    assert not missing, f"rules of the paper plan the slice did not run: {sorted(missing)}"
    assert {"fetch_dataset_beir", "build_index", "retrieve"} <= set(ran), ran

    # Every source kind was read from loopback, pinned to what the build published.
    pins = load_yaml(work / "resources" / "rehearsal" / "pins.yaml")
    manifests = _manifests(work)
    kinds = {m["source"]["kind"] for m in manifests.values()}
    assert kinds == {"pyserini_prebuilt", "hf_datasets", "url", "user_supplied"}, kinds
    endpoint = env["HF_ENDPOINT"]
    for cid, m in manifests.items():
        pinned = pins["catalogue_overrides"].get(cid, {}).get("source", {})
        if m["source"]["kind"] == "hf_datasets":
            assert (m["version"]["revision"], m["version"]["endpoint"]) == (pinned["revision"], endpoint), cid
            assert m["sha256"], cid
        elif m["source"]["kind"] == "url":
            assert list(m["sha256"].values()) == [pinned["sha256"]] and m["version"]["url"] == pinned["url"], cid
        elif m["source"]["kind"] == "pyserini_prebuilt":
            assert m["version"]["mirror"]["url"] == pinned["prebuilt_index"]["url"], cid
            assert m["version"]["md5"] == pinned["prebuilt_index"]["md5"], cid
    assert manifests["msmarco-train"]["version"]["pyserini_topics"] == {"kind": "irds", "id": "msmarco-passage/train/judged"}
    claims = json.loads((work / "resources/datasets/climate-fever/verdict_labels.manifest.json").read_text())
    assert claims["version"]["revision"] == pins["catalogue_overrides"]["climate-fever"]["verdict_labels"]["revision"]
    assert claims["version"]["endpoint"] == endpoint and claims["rows"]["DISPUTED"] >= 1, claims
    fetched = [name for name in pins["models"] if (work / "resources" / "models" / name).is_dir()]
    assert len(fetched) == ran["fetch_model"], fetched
    for name in fetched:
        model = json.loads((work / "resources" / "models" / name / "manifest.json").read_text())
        assert (model["commit"], model["endpoint"]) == (pins["models"][name]["revision"], endpoint), name

    # Every row of the slice is in Table 1, and every scorer family of the paper's rows scored.
    table = (work / "results" / "table1.csv").read_text()
    header, *rows = table.splitlines()
    assert header.startswith("variant,")
    assert set(SLICE_VARIANTS) <= {r.split(",")[0] for r in rows}, table
    paper_cfg = load_yaml(REPO / "configs" / "paper.yaml")["variants"]
    families = {v.get("scorer") for v in paper_cfg.values() if "skip" not in v} - {"vllm"}
    slice_families = {load_yaml(work / "slice.yaml")["variants"][v]["scorer"] for v in SLICE_VARIANTS}
    assert families <= slice_families | {None}, families - slice_families

    # The verdict reader judged every reranking row's shuffles on Climate-FEVER's claims.
    rerank_rows = {load_yaml(work / "slice.yaml")["variants"][v].get("label", v) for v in SLICE_VARIANTS
                   if "rerank" in load_yaml(work / "slice.yaml")["variants"][v].get("tasks", ["rerank"])}
    verdicts = (work / "results" / "verdict_flip.csv").read_text()
    assert all(f"{label},climate-fever,random_shuffle" in verdicts for label in rerank_rows), verdicts
    for out in DECISIONS:
        assert (work / out).stat().st_size > 0, out

    print(f"rehearsal slice: {sum(ran.values())} jobs, {len(submitted)} sbatch submissions "
          f"({slurm_wall:.0f} s through Slurm), {wall:.0f} s in all")

    # A changed revision re-plans only what depends on it: republish pairrm, pin the new commit.
    repo = work / "resources" / "rehearsal" / "hub" / "models" / "llm-blender" / "PairRM"
    content = work / "pairrm-next"
    shutil.copytree(repo, content, ignore=shutil.ignore_patterns(".git"))
    (content / "README.md").write_text((content / "README.md").read_text() + "\nA second commit.\n")
    from presdep.rehearsal.git_repos import publish

    pins["models"]["pairrm"]["revision"] = publish(content, repo.parents[2], "models", "llm-blender/PairRM", "next")
    (work / "resources" / "rehearsal" / "pins.yaml").write_text(yaml.safe_dump(pins))
    dry = subprocess.run([str(Path(sys.executable).with_name("snakemake")), "-n", "--cores", "2", *config, "--",
                          "results/table1.csv"], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr[-3000:]
    replanned = planned_jobs(dry.stdout + dry.stderr)
    assert replanned.get("fetch_model") == 1 and "fetch_dataset" not in replanned, replanned
    assert set(replanned) <= {"fetch_model", "score", "metrics", "table1"}, replanned


def test_a_sha256_mismatch_fails_the_fetch_naming_dataset_file_and_digests(rehearsal):
    work, ports = rehearsal
    pins = load_yaml(work / "resources" / "rehearsal" / "pins.yaml")
    good = pins["catalogue_overrides"]["musique"]["source"]["sha256"]
    pins["catalogue_overrides"]["musique"]["source"]["sha256"] = "0" * 64
    bad = work / "bad-pins.yaml"
    bad.write_text(yaml.safe_dump(pins))
    env = _client_env(work, ports, Path(sys.executable))
    run = subprocess.run([str(Path(sys.executable).with_name("snakemake")), "--cores", "1", "--configfile",
                          str(_slice_config(work)), str(bad), "--directory", str(work), "--",
                          "resources/datasets/musique/manifest.json"], cwd=work, env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    log = (work / "logs" / "fetch_dataset" / "musique.log").read_text()
    assert run.returncode != 0
    assert "musique" in log and "musique_v1.0.zip" in log and good in log and "0" * 64 in log, log[-2000:]
    assert not (work / "resources" / "datasets" / "musique" / "manifest.json").exists()


def test_a_stopped_hub_fails_the_fetch_clearly_and_a_rerun_after_restart_completes(rehearsal):
    work, ports = rehearsal
    env = _client_env(work, ports, Path(sys.executable))
    target = "resources/datasets/rewardbench2/manifest.json"
    shutil.rmtree(work / "resources" / "datasets" / "rewardbench2", ignore_errors=True)
    cmd = [str(Path(sys.executable).with_name("snakemake")), "--cores", "1", "--configfile",
           str(_slice_config(work)), "resources/rehearsal/pins.yaml", "--", target]
    assert _presdep(work, "stop", "--only", "hub", timeout=60).returncode == 0
    try:
        down = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        log = (work / "logs" / "fetch_dataset" / "rewardbench2.log").read_text()
        assert down.returncode != 0
        assert "could not read allenai/reward-bench-2" in log and env["HF_ENDPOINT"] in log, log[-2000:]
    finally:
        restart = _presdep(work, *ports, "start", "--only", "hub", "--olah", str(OLAH), timeout=120)
        assert restart.returncode == 0, restart.stderr
    up = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert up.returncode == 0, up.stderr[-3000:]
    assert (work / target).is_file()
