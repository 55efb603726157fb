"""The paper's Table 1 columns: which metrics rows each one aggregates, and which way is better."""

from __future__ import annotations

from typing import NamedTuple


class Table1Column(NamedTuple):
    task: str
    metric: str
    perturbation: str
    direction: str  # "higher" or "lower": which values are better


# The one mapping from Table 1 column to the metrics rows it aggregates: quality cells from the
# first-stage pass, instability and decisions from the random shuffles (docs/methods/table1.md).
TABLE1_COLUMNS: dict[str, Table1Column] = {
    "rerank_ndcg10": Table1Column("rerank", "ndcg@10", "first_stage", "higher"),
    "rerank_tau_psi": Table1Column("rerank", "tau_psi", "random_shuffle", "lower"),
    "rerank_jaccard": Table1Column("rerank", "jaccard", "random_shuffle", "higher"),
    "qa_ndcg10": Table1Column("qa", "ndcg@10", "first_stage", "higher"),
    "qa_tau_psi": Table1Column("qa", "tau_psi", "random_shuffle", "lower"),
    "qa_answer_flip": Table1Column("qa", "answer_flip", "random_shuffle", "lower"),
    "resp_ndcg1": Table1Column("response", "ndcg@1", "first_stage", "higher"),
    "resp_tau_psi": Table1Column("response", "tau_psi", "random_shuffle", "lower"),
    "resp_pair_flip": Table1Column("response", "pair_flip", "random_shuffle", "lower"),
}

COLUMN_TITLES = {
    "rerank_ndcg10": "nDCG@10",
    "rerank_tau_psi": "tau-PSI",
    "rerank_jaccard": "Jacc.",
    "qa_ndcg10": "QA nDCG",
    "qa_tau_psi": "QA tau-PSI",
    "qa_answer_flip": "ans. flip",
    "resp_ndcg1": "Resp nDCG@1",
    "resp_tau_psi": "Resp tau-PSI",
    "resp_pair_flip": "pair flip",
}
