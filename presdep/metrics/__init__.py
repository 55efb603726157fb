"""Exact implementations of the paper's metrics (see the Metrics section of the method).

quality      nDCG@k, MAP, MRR, recall through pytrec_eval; ties by presented position
instability  tau-PSI (vectorised exact Kendall tau), Zeng et al. PSI
decisions    frozen threshold, retained-set Jaccard, matched retention, set/pair/selection flips
thresholds   the 50/50 development/test split and the t* artifact
qa           SQuAD normalisation, EM, F1 (HotpotQA yes/no rule), answer flip
bsc          BSC's K-curve
bsc_adaptive adaptive BSC: shuffles added until the decision settles
flip_ledger  why each decision flipped (flip_rules: one rule per decision; ledger_rows: beside the metrics)
slot_test    the slot share's chance level, its permutation test, query-clustered slot intervals
compute      scores table -> long metrics table, from:
  blocks         the scores table as per-query blocks of presentations
  rows           the row collector (per-query rows and their aggregate)
  rerank_rows    retained sets at t* and the threshold rows (reranking)
  qa_rows        gold slots in the top k and the reader's answers (QA)
  response_rows  selection, pair and selected-quality flips (responses)
  zeng_rows      Zeng et al.'s PSI rows
  position_rows  the slot profile, variance shares and the slot test (random shuffles)
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
from presdep.metrics.quality import (
    evaluate_presentations,
    ndcg_presentations,
    ndcg_runs,
    presented_order,
    presented_ranks,
    qrels_to_dict,
    strict_scores,
)
from presdep.metrics.thresholds import read_thresholds, split_queries, tune_thresholds

__all__ = [
    "answer_flip",
    "build_blocks",
    "compute_metrics",
    "evaluate_presentations",
    "exact_match",
    "f1_score",
    "mean_pairwise_tau",
    "metrics_from_files",
    "mode_flip",
    "ndcg_presentations",
    "ndcg_runs",
    "normalize_answer",
    "pair_flip",
    "presented_order",
    "presented_ranks",
    "qrels_to_dict",
    "read_thresholds",
    "selection_flip",
    "set_stats",
    "set_stats_many",
    "split_queries",
    "strict_scores",
    "tau_psi",
    "tau_psi_many",
    "tune_threshold",
    "tune_thresholds",
    "write_metrics",
    "zeng_psi",
    "zeng_psi_corpus",
]
