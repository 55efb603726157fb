"""A scorer named by a file of the repository (``scorers/firstslot.py:make_firstslot``), with
``options:`` and BSC, scored by the real workflow with no install step; changing an option
re-runs that variant's score job only, editing the file the jobs of the variants naming it."""

from __future__ import annotations

import pytest
from workflow_utils import TINY_RERANK_CONFIG, planned_jobs, scratch_workflow, snakemake

from presdep.contracts.schemas import read_metadata

FIRSTSLOT = '''
import hashlib

from presdep.scoring import GradeReadout


def _content_fraction(text):
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16) / 16**8


class FirstSlot:
    name = "firstslot"

    def __init__(self, bonus):
        self.bonus = bonus

    def score(self, query, docs):
        words = set(query.lower().split())
        return [GradeReadout(sum(w in words for w in d.lower().split()) + _content_fraction(d)
                             + (self.bonus if i == 0 else 0.0)) for i, d in enumerate(docs)]

    def score_prompts(self, prompts):
        return [self.score(q, d) for q, d in prompts]


def make_firstslot(run, prompt, first_slot_bonus=0.0):
    return FirstSlot(first_slot_bonus)


make_firstslot.capabilities = {"batched_listwise": True, "needs_model": False, "env": "cpu", "local_model": False,
                               "mem_mb": 1000, "runtime": 10}
'''

CONFIG = TINY_RERANK_CONFIG + """variants:
  bm25: {label: First stage, scorer: identity}
  plain: {scorer: "scorers/firstslot.py:make_firstslot"}
  firstslot: {scorer: "scorers/firstslot.py:make_firstslot", bsc_k: 2, bsc_ensembles: 2,
              options: {first_slot_bonus: BONUS}}
figure1: {variant: firstslot, dataset: synthetic}
"""
VARIANTS = ("bm25", "plain", "firstslot")
TARGETS = [f"results/scores/{v}/synthetic.parquet" for v in VARIANTS]


def _rerun(dry_run_output: str) -> list[str]:
    """The variants whose score job a dry run lists."""
    return [v for v in VARIANTS if f"output: results/scores/{v}/synthetic.parquet" in dry_run_output]


@pytest.mark.slow  # about 20 s: one tiny run and two dry runs
def test_a_file_scorer_with_options_runs_and_reruns_only_its_variants(tmp_path):
    work = scratch_workflow(tmp_path)
    (work / "scorers").mkdir()
    (work / "scorers" / "firstslot.py").write_text(FIRSTSLOT)
    (work / "plugin.yaml").write_text(CONFIG.replace("BONUS", "0.5"))
    snakemake(work, *TARGETS, "--cores", "1", "--configfile", "plugin.yaml", timeout=300)
    meta = read_metadata(work / "results/scores/firstslot/synthetic.parquet")
    assert meta["bsc_k"] == 2
    assert meta["scorer"]["scorer_identity"]["options"] == {"first_slot_bonus": 0.5}
    digest = meta["params"]["variant"]["scorer_sha256"]
    assert meta["scorer"]["scorer_identity"]["scorer_sha256"] == digest and len(digest) == 64

    (work / "plugin.yaml").write_text(CONFIG.replace("BONUS", "0.25"))
    dry = snakemake(work, *TARGETS, "--cores", "1", "--configfile", "plugin.yaml", "-n").stdout
    assert planned_jobs(dry) == {"score": 1} and _rerun(dry) == ["firstslot"], dry[-3000:]

    (work / "plugin.yaml").write_text(CONFIG.replace("BONUS", "0.5"))
    (work / "scorers" / "firstslot.py").write_text(FIRSTSLOT + "\n# an edit: new bytes, new identity\n")
    dry = snakemake(work, *TARGETS, "--cores", "1", "--configfile", "plugin.yaml", "-n").stdout
    assert planned_jobs(dry) == {"score": 2} and _rerun(dry) == ["plain", "firstslot"], dry[-3000:]
