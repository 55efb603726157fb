"""The paper matrix (configs/paper.yaml): the paper's populations and rows, and a dry run of all of it.

The expectations are written here from ../shared/METHODS.md (v2), sections "Populations",
"Training" and "Table 1", never taken from the config or the code under test.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from workflow_utils import REPO, planned_jobs, scratch_workflow, snakemake

from presdep.config.catalogue import fetch_key

PAPER = "configs/paper.yaml"
# METHODS.md "Populations": 18 reranking, 3 QA, 5 response-ranking collections.
RERANK = {"dl19", "dl20", "dl21", "dl22", "dl23", "touche2020", "fiqa", "nfcorpus", "arguana", "climate-fever",
          "trec-covid", "dbpedia-entity", "scifact", "signal1m", "trec-news", "robust04", "legal-a", "legal-b"}
QA = {"hotpotqa", "2wikimultihopqa", "musique"}
RESPONSE = {"rewardbench2", "nectar", "ppe-math", "ppe-mmlu-pro", "rm-bench"}
NOT_IN_POPULATION = {"scidocs", "nq", "hotpotqa-beir", "quora", "cqadupstack"}
# METHODS.md "Training": one pool per task.
POOLS = {"rerank": "msmarco-train", "qa": "hotpotqa-train", "response": "ultrafeedback-train"}
# METHODS.md "Table 1", in order.
TABLE1 = ["Off the shelf", "CapCal", "Round-robin", "BSC (x10)", "jina-reranker-v3", "GPT-5.4 (hosted)",
          "Single-order", "Order-averaged", "DebiasFirst", "Permutation augmentation", "OC-SFT"]
TRAINED = {"Single-order": "single_order", "Order-averaged": "order_averaged", "DebiasFirst": "debias_first",
           "Permutation augmentation": "perm_aug", "OC-SFT": "oc_sft"}
LAMBDA_GRIDS = {"rerank": [0.5, 1, 2, 3, 4, 5], "qa": [0.5, 1, 2, 3], "response": [1.0]}
SEEDS = [42, 43, 44]
# A presentation index (m, t, k) must never be a wildcard: a score job loops over all of them.
ALLOWED_WILDCARDS = {"dataset", "variant", "collection", "split", "index", "model", "B", "teacher", "student",
                     "seed", "taskset", "kind", "catalogue_id"}


def _raw() -> dict:
    return yaml.safe_load((REPO / PAPER).read_text())


@pytest.fixture(scope="module")
def paper():
    """The validated config exactly as the workflow builds it (catalogue entries resolved, defaults filled)."""
    from snakemake.utils import update_config  # Snakemake's own merge of a --configfile

    from presdep.config import SCHEMA_PATH, apply_replacing_sections, load_workflow_config

    merged = yaml.safe_load((REPO / "workflow_config.yaml").read_text())
    update_config(merged, _raw())
    filled, _ = load_workflow_config(apply_replacing_sections(merged, [REPO / PAPER]), SCHEMA_PATH)
    return filled


@pytest.fixture(scope="module")
def paper_dry_run(tmp_path_factory):
    work = scratch_workflow(tmp_path_factory.mktemp("paper"))
    out = snakemake(work, "-n", "--configfile", PAPER, "--", "results/table1.csv", timeout=600)
    assert not (work / "results").exists() and not (work / "resources").exists(), "a dry run computes nothing"
    return out.stdout + out.stderr


def _jobs(text: str) -> list[dict]:
    """[{rule, wildcards: {...}}] from the dry run's job list (a group job's members are indented)."""
    jobs = []
    for line in text.splitlines():
        m = re.match(r"^\s*(?:local)?rule (\w+):$", line)
        if m:
            jobs.append({"rule": m.group(1), "wildcards": {}})
        m = re.match(r"^\s+wildcards: (.+)$", line)
        if m and jobs:
            jobs[-1]["wildcards"] = dict(kv.split("=", 1) for kv in m.group(1).split(", "))
    return jobs


def test_the_model_is_qwen3_4b_pinned_with_thinking_off_and_the_geometry_is_the_papers():
    cfg = _raw()
    qwen = cfg["models"]["qwen3_4b"]
    assert (qwen["source"], qwen["id"]) == ("hf", "Qwen/Qwen3-4B")
    assert re.fullmatch(r"[0-9a-f]{40}", qwen["revision"]), "pin the Hugging Face commit, not a branch"
    assert qwen["chat_template_kwargs"] == {"enable_thinking": False}
    assert cfg["protocol"]["M"] == 10
    assert cfg["protocol"]["B"] == {"rerank": 20, "qa": 10, "response": 4}


def test_the_populations_are_exactly_those_of_the_paper(paper):
    # The config names the whole population; sets that are not public and have no local
    # copy here move to skipped_datasets with what the user must supply.
    # Aliases (alias_of: a dataset under other settings) are the appendix programs', not Table 1's.
    named = {n for n, d in _raw()["datasets"].items() if d.get("role", "eval") == "eval" and "alias_of" not in d}
    assert named == RERANK | QA | RESPONSE
    tasks = {name: d["task"] for name, d in paper["datasets"].items() if d["role"] == "eval" and "alias_of" not in d}
    skipped = paper["skipped_datasets"]
    assert set(tasks) | set(skipped) == RERANK | QA | RESPONSE and not set(tasks) & set(skipped)
    assert all(len(reason) > 20 for reason in skipped.values()), skipped
    for task, population in (("rerank", RERANK), ("qa", QA), ("response", RESPONSE)):
        runnable = {n for n, t in tasks.items() if t == task}
        assert runnable and runnable <= population, (task, runnable)  # at least one per Table 1 task
    assert not NOT_IN_POPULATION & set(paper["datasets"])
    # Each training pool is there with its task, and a held-out split beside it.
    for task, pool in POOLS.items():
        assert paper["datasets"][pool]["role"] == "train" and paper["datasets"][pool]["task"] == task
    heldout = {d["task"] for d in paper["datasets"].values() if d["role"] == "heldout"}
    assert heldout == set(POOLS)


def test_all_eleven_rows_and_three_seeds_per_trained_row(paper):
    variants = paper["variants"]
    labels = [v.get("label") for v in variants.values()]
    assert [lab for lab in dict.fromkeys(labels) if lab in TABLE1] == TABLE1, "Table 1's rows, in the paper's order"
    by_label = {lab: [v for v in variants.values() if v.get("label") == lab] for lab in TABLE1}
    # Inference rows: the base model, one mechanism each.
    assert by_label["CapCal"][0]["calibration"] == "capcal"
    assert by_label["Round-robin"][0]["chunking"] == "round_robin"
    assert (by_label["BSC (x10)"][0]["bsc_k"], by_label["BSC (x10)"][0]["bsc_ensembles"]) == (10, 4)
    assert by_label["jina-reranker-v3"][0]["scorer"] == "jina_listwise"
    hosted = by_label["GPT-5.4 (hosted)"][0]
    assert hosted["scorer"] == "hosted" and "OPENAI_API_KEY" in hosted.get("skip", ""), "skipped with its reason"
    # Trained rows: one student per task, trained on that task's pool, seeds 42, 43, 44.
    teachers = paper["teachers"]
    for label, objective in TRAINED.items():
        runs = by_label[label]
        assert sorted(tuple(v["tasks"]) for v in runs) == [("qa",), ("rerank",), ("response",)], label
        for v in runs:
            s, task = v["student"], v["tasks"][0]
            assert s["objective"] == objective and not v.get("skip")
            assert s["seeds"] == SEEDS
            assert s["train"] == POOLS[task] and paper["datasets"][s["heldout"]]["task"] == task
            assert teachers[s["teacher"]]["T"] == 10 and teachers[s["teacher"]]["kind"] == "open_weight"
            lam = s["lambda"] if isinstance(s["lambda"], list) else [s["lambda"]]
            if objective == "oc_sft":
                assert [float(x) for x in lam] == LAMBDA_GRIDS[task], (label, task)
                assert s["lambda_rule"][task] == {"rerank": "one_se", "qa": "seed_mean", "response": "fixed"}[task]
            else:
                assert [float(x) for x in lam] == [0.0]
    # Reference rows of METHODS.md beside Table 1 (skipped rows keep a reason).
    refs = {v["scorer"] for v in variants.values()}
    assert {"generative_listwise", "mxbai_rerank", "reward_model", "pairrm"} <= refs
    for name, v in variants.items():
        model = paper["models"].get(v.get("model"), {})
        if model.get("source") == "hf" and "revision" in model:
            assert re.fullmatch(r"[0-9a-f]{40}", model["revision"]), name


def _expected_jobs(cfg: dict) -> dict[str, int]:
    """Job counts per rule, worked out from the config's entries and the protocol (not from the workflow)."""
    ds = cfg["datasets"]
    runnable = {n: v for n, v in cfg["variants"].items() if not v.get("skip")}

    def runs(v):  # scoring runs of a variant: one per training seed
        return len(v["student"]["seeds"]) if v.get("student") else 1

    def eval_of(v, task=None):  # Table 1's datasets: aliases are the appendix programs'
        return [n for n, d in ds.items() if d["role"] == "eval" and "alias_of" not in d and d["task"] in v["tasks"]
                and task in (None, d["task"])]

    trained = {n: v for n, v in runnable.items() if v.get("student")}
    grid = lambda v: len(v["student"]["lambda"]) if isinstance(v["student"]["lambda"], list) else 1  # noqa: E731
    return {
        "score": sum(runs(v) * len(eval_of(v)) for v in runnable.values()),
        "metrics": sum(runs(v) * len(eval_of(v)) for v in runnable.values()),
        # t* is tuned once per (run, reranking dataset); the reader answers per (run, QA dataset).
        "thresholds": sum(runs(v) * len(eval_of(v, "rerank")) for v in runnable.values()),
        "read_answers": sum(runs(v) * len(eval_of(v, "qa")) for v in runnable.values()),
        # silver -> train -> select -> score, per trained row.
        "silver_labels": len({(v["student"]["teacher"], v["student"]["train"]) for v in trained.values()}),
        "train_student": sum(grid(v) * len(v["student"]["seeds"]) for v in trained.values()),
        "select_lambda": len(trained),
        "build_fixture": len([n for n, d in ds.items() if "alias_of" not in d]),
        "table1": 1,
    }


def test_the_dry_run_lists_every_job_of_the_matrix(paper, paper_dry_run):
    jobs = planned_jobs(paper_dry_run)
    expected = _expected_jobs(paper)
    assert {rule: jobs.get(rule, 0) for rule in expected} == expected
    # Models: each one a runnable row, the reader or a teacher loads, fetched once.
    used = {v["model"] for v in paper["variants"].values() if not v.get("skip") and v.get("model")}
    teachers = {v["student"]["teacher"] for v in paper["variants"].values() if not v.get("skip") and v.get("student")}
    used |= {paper["reader"]["model"]} | {paper["teachers"][t]["model"] for t in teachers
                                          if paper["teachers"][t]["kind"] == "open_weight"}
    assert jobs.get("fetch_model", 0) == len(used)
    print("paper matrix jobs per rule:", dict(sorted(jobs.items(), key=lambda kv: -kv[1])), "total", sum(jobs.values()))
    assert sum(jobs.values()) < 3000, "the paper matrix must stay in the low thousands of jobs"


def test_each_trained_row_goes_silver_train_select_score(paper, paper_dry_run):
    jobs = _jobs(paper_dry_run)
    have = Counter((j["rule"], tuple(sorted(j["wildcards"].items()))) for j in jobs)
    rules_for = lambda rule, **wc: have[(rule, tuple(sorted(wc.items())))]  # noqa: E731
    for name, v in paper["variants"].items():
        if not v.get("student"):
            continue
        s = v["student"]
        assert rules_for("silver_labels", teacher=s["teacher"], dataset=s["train"]) == 1, name
        lams = s["lambda"] if isinstance(s["lambda"], list) else [s["lambda"]]
        for lam in lams:
            for seed in s["seeds"]:
                assert rules_for("train_student", student=f"{name}__lambda{float(lam):g}", seed=str(seed)) == 1, (name, lam, seed)
        assert rules_for("select_lambda", variant=name) == 1, name
        for seed in s["seeds"]:
            scored = {j["wildcards"]["dataset"] for j in jobs
                      if j["rule"] == "score" and j["wildcards"].get("variant") == f"{name}/seed{seed}"}
            want = {n for n, d in paper["datasets"].items()
                    if d["role"] == "eval" and "alias_of" not in d and d["task"] in v["tasks"]}
            assert scored == want, (name, seed)


def test_no_presentation_is_a_wildcard(paper_dry_run):
    names = set()
    for line in re.findall(r"^\s+wildcards: (.+)$", paper_dry_run, re.M):
        names |= {kv.split("=", 1)[0].strip() for kv in line.split(", ")}
    assert names, "the dry run printed no wildcards"
    assert names <= ALLOWED_WILDCARDS, f"unexpected wildcards: {names - ALLOWED_WILDCARDS}"
    assert not re.search(r"(presentation|shuffle)s?[/_]?\d", paper_dry_run), "a path is keyed by a presentation"


@pytest.fixture(scope="module")
def local_copies_dry_run(tmp_path_factory):
    """The entries that are skipped without files, each given a local copy (placeholder files): fetch jobs only."""
    catalogue = yaml.safe_load((REPO / "presdep" / "config" / "catalogue.yaml").read_text())
    tmp = tmp_path_factory.mktemp("local")
    work = scratch_workflow(tmp)
    datasets = {}
    for cid, entry in catalogue["datasets"].items():
        if entry["availability"] == "public":
            continue
        local = entry["source"]["local"]
        if "beir" in local:  # a BEIR folder, as the entry's supply note describes
            folder = tmp / cid
            (folder / "qrels").mkdir(parents=True)
            for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
                (folder / name).write_text("")
            datasets[cid] = {"from_catalogue": True, "local_path": {"beir": str(folder)}}
        else:
            files = {key: tmp / f"{cid}.{key}" for key in local}
            for f in files.values():
                f.write_text("")
            datasets[cid] = {"from_catalogue": True, "local_path": {k: str(f) for k, f in files.items()}}
    (work / "local.yaml").write_text(yaml.safe_dump({"datasets": datasets,
                                                     "variants": {"first_stage": {"scorer": "identity"}}}))
    # A local copy's fetch writes into its source-keyed folder, resources/datasets/<id>/local-<digest>/.
    targets = [f"resources/datasets/{fetch_key(cid, d['local_path'])}/manifest.json" for cid, d in datasets.items()]
    out = snakemake(work, "-n", "--configfile", "local.yaml", "--", *targets, timeout=300)
    return datasets, out.stdout + out.stderr


def _fetched(text: str) -> set[str]:
    """Catalogue ids whose manifest a fetch* job of this dry run writes."""
    ids, rule = set(), None
    for line in text.splitlines():
        m = re.match(r"^\s*(?:local)?rule (\w+):$", line)
        if m:
            rule = m.group(1)
        m = re.match(r"^\s+output: (.+)$", line)
        if m and rule and rule.startswith("fetch"):
            ids |= set(re.findall(r"resources/datasets/([^/,]+)(?:/local-[0-9a-f]{12})?/manifest\.json", m.group(1)))
    return ids


def test_every_catalogue_entry_has_a_fetch_rule(paper_dry_run, local_copies_dry_run):
    catalogue = yaml.safe_load((REPO / "presdep" / "config" / "catalogue.yaml").read_text())
    entries = set(catalogue["datasets"]) | set(catalogue["training_pools"])
    assert entries == RERANK | QA | RESPONSE | set(POOLS.values()), "the catalogue is the paper's populations and pools"
    local, text = local_copies_dry_run
    assert local, "expected gated or proprietary entries (METHODS.md: legal-a/b are not distributed)"
    assert set(local) <= _fetched(text), set(local) - _fetched(text)
    missing = entries - _fetched(paper_dry_run) - set(local)
    assert not missing, f"no fetch job writes resources/datasets/<id>/manifest.json for {sorted(missing)}"


def test_presdep_plan_lists_every_training_job_and_each_fits_an_80_gb_gpu(paper_dry_run):
    """`presdep plan` plans exactly the dry run's train_student jobs, each within the site profile's
    80 GB H100 less the memory margin, and bills every rule with the dry run's job count."""
    proc = subprocess.run([str(Path(sys.executable).with_name("presdep")), "plan", "--configfile", PAPER,
                           "--profile", "profiles/site-example", "--json"], cwd=REPO, capture_output=True,
                          text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    billed = {r["rule"]: r["jobs"] for r in json.loads(proc.stdout)["rules"]}
    assert billed == planned_jobs(paper_dry_run)
    plans = json.loads(proc.stdout)["jobs"]
    planned = {(p["job"].split("/")[0], p["job"].split("/seed")[1]) for p in plans}
    dry = {(j["wildcards"]["student"], j["wildcards"]["seed"]) for j in _jobs(paper_dry_run)
           if j["rule"] == "train_student"}
    assert planned == dry and len(plans) == len(dry)
    for p in plans:
        assert p["rule"] == "train_student" and p["fits"], p
        assert p["gpu_gib"] == pytest.approx(80e9 / 2**30, abs=0.01)
        assert p["predicted_peak_gib"] <= 0.9 * p["gpu_gib"] + 0.01
        # the step's coupled views fit together: OC-SFT's two prompts at the dataset's prompt cap, at least
        assert p["prompts_per_micro_batch"] >= p["views"] and p["micro_batch_tokens"] >= p["views"] * p["prompt_tokens"]


def test_the_paper_plans_its_one_scorer_programs(tmp_path):
    """The context decomposition and the render perturbations: off the shelf on DL19, one job each."""
    work = scratch_workflow(tmp_path)
    out = snakemake(work, "-n", "--configfile", PAPER, "--", "results/context_decomposition.md",
                    "results/render_perturbations.md", timeout=600)
    jobs = planned_jobs(out.stdout + out.stderr)
    for rule in ("score_context", "context_metrics", "context_table", "score_render", "render_metrics", "render_table"):
        assert jobs.get(rule) == 1, rule
    assert jobs["score"] == 1 and jobs["thresholds"] == 1  # the row's own scores and t* (render decisions)


def test_the_paper_plans_its_pool_and_width_programs(paper, tmp_path):
    """The pool perturbation on ArguAna's depth-101 alias for every untrained, uncalibrated single-pass
    reranking row; the width on the three response collections and their B = 1 aliases, every row."""
    work = scratch_workflow(tmp_path)
    out = snakemake(work, "-n", "--configfile", PAPER, "--", "results/pool_perturbation.md", "results/width.md",
                    timeout=600)
    jobs = planned_jobs(out.stdout + out.stderr)
    runnable = {n: v for n, v in paper["variants"].items() if not v.get("skip")}
    single_pass_rerank = [n for n, v in runnable.items() if "rerank" in v["tasks"] and not v.get("student")
                          and v["calibration"] == "none" and v["bsc_k"] == 1]
    assert paper["pool_perturbation"]["datasets"] == ["arguana-pool"]
    assert jobs["score_pool"] == jobs["pool_metrics"] == len(single_pass_rerank) == 6
    response_runs = sum(len(v["student"]["seeds"]) if v.get("student") else 1
                        for v in runnable.values() if "response" in v["tasks"])
    pairs = paper["width"]["pairs"]
    assert sorted(pairs) == ["ppe-math", "ppe-mmlu-pro", "rm-bench"]
    # Each response run scores each native collection and its alias: 21 runs x 6 datasets.
    assert jobs["score"] == response_runs * 2 * len(pairs) == 126
    assert jobs["pool_table"] == jobs["width"] == 1
