"""Exact implementations of the paper's metrics (see the Metrics section of the method).

quality      nDCG@k through pytrec_eval, trec_eval semantics, explicit tie order
instability  tau-PSI (vectorised exact Kendall tau), Zeng et al. PSI
decisions    frozen threshold, retained-set Jaccard, set/pair/selection flips
qa           SQuAD normalisation, EM, F1, answer flip
compute      scores table -> long metrics table
"""

from presdep.metrics.compute import build_blocks, compute_metrics, metrics_from_files, write_metrics
from presdep.metrics.decisions import (
    mode_flip,
    pair_flip,
    selection_flip,
    set_stats,
    set_stats_many,
    tune_threshold,
)
from presdep.metrics.instability import (
    mean_pairwise_tau,
    tau_psi,
    tau_psi_many,
    zeng_psi,
    zeng_psi_corpus,
)
from presdep.metrics.qa import answer_flip, exact_match, f1_score, normalize_answer
from presdep.metrics.quality import ndcg_presentations, ndcg_runs, qrels_to_dict, strict_scores

__all__ = [
    "answer_flip",
    "build_blocks",
    "compute_metrics",
    "exact_match",
    "f1_score",
    "mean_pairwise_tau",
    "metrics_from_files",
    "mode_flip",
    "ndcg_presentations",
    "ndcg_runs",
    "normalize_answer",
    "pair_flip",
    "qrels_to_dict",
    "selection_flip",
    "set_stats",
    "set_stats_many",
    "strict_scores",
    "tau_psi",
    "tau_psi_many",
    "tune_threshold",
    "write_metrics",
    "zeng_psi",
    "zeng_psi_corpus",
]
