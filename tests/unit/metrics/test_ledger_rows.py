"""The metrics job writes the run's flip ledger beside its metrics, and the ledger's counts among them."""

import polars as pl
from scorers_tiny import VARIANT, protocol

from presdep.contracts.readouts import GradeReadout
from presdep.contracts.schemas import read_table, write_table
from presdep.metrics.compute import metrics_from_files
from presdep.metrics.flip_ledger import CAUSES, ledger_shares
from presdep.metrics.thresholds import tune_thresholds, write_thresholds


class FirstSlotBonus:
    """The document's grade (what a good reader would see) plus a bonus in the prompt's first slot:
    a threshold worth tuning, and flips caused by the slot."""

    name = "first_slot_bonus"
    template_sha256 = "first-slot"

    def __init__(self, grades):
        self.grades = grades

    def score_prompts(self, prompts):
        return [[GradeReadout(self.grades[d] + (1.5 if s == 0 else 0.0)) for s, d in enumerate(docs)]
                for _, docs in prompts]


def test_the_metrics_job_writes_the_ledger_and_its_counts(tmp_path):
    from scorers_tiny import fixture

    from presdep.config.records import Protocol, ScoringRun
    from presdep.scoring.run import score_dataset

    cand, qrels = fixture(8, 12)
    by_text = dict(zip(cand["doc_id"], cand["doc"]))
    grades = {by_text[d]: float(g) for d, g in zip(qrels["doc_id"], qrels["relevance"])}
    write_table(qrels, tmp_path / "q.parquet", "qrels")
    score_dataset(cand, dataset="toy", run=ScoringRun.checked({**VARIANT, "scorer": "first_slot_bonus"}),
                  protocol=Protocol.checked(protocol(B=4, M=6, perturbations=("random_shuffle", "within_chunk"))),
                  out_path=tmp_path / "s.parquet", qrels=qrels, scorer=FirstSlotBonus(grades))
    scores = read_table(tmp_path / "s.parquet", "scores")
    write_thresholds(tune_thresholds(scores, qrels), tmp_path / "t.json")
    metrics = metrics_from_files(tmp_path / "s.parquet", tmp_path / "q.parquet", tmp_path / "m.parquet", dataset="toy",
                                 task="rerank", variant="v", seed=None, thresholds_path=tmp_path / "t.json",
                                 ledger_path=tmp_path / "ledger.parquet")
    ledger = read_table(tmp_path / "ledger.parquet", "flip_ledger")
    assert ledger.height > 0 and set(ledger["decision"].unique()) <= {"retained", "matched"}
    rows = metrics.filter(pl.col("perturbation") == "flip_ledger")
    got = dict(zip(rows["metric"], rows["value"]))
    for decision in ("retained", "matched"):
        shares = ledger_shares(ledger, decision)
        assert got[f"{decision}_flips"] == shares["flips"]
        assert sum(got[f"{decision}_{c}"] for c in CAUSES) == shares["flips"]
    assert got["retained_slot"] > 0.5 * got["retained_flips"], "a first-slot bonus flips by the slot"
    assert got["retained_noise_tested"] == 0 and got["retained_parse_tested"] == 0, "no re-reads, no repair flags"
    assert got["retained_slot_tested"] == got["retained_flips"]
