"""Table 1's notes answer both questions: the verdict in plain words (order dependence, nDCG over
the shuffles against the first-stage pass, the decision in words), the slot named whenever the slot
test finds an effect, degenerate cells with their remedy, flags with one legend, and a footnote
that gives M, B, depth and the query counts as the metrics record them."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from presdep.config.records import Variant
from presdep.contracts.schemas import write_table
from presdep.metrics.design_rows import design_rows
from presdep.metrics.rerank_rows import DEGENERATE_FLAGS
from presdep.report import table1_notes
from presdep.report.table1_notes import DEGENERATE_FIXES, FLAGS
from presdep.report.tables import build_table1, write_table1

REPO = Path(__file__).resolve().parents[3]
SCHEMA = {"dataset": pl.String, "task": pl.String, "variant": pl.String, "seed": pl.Int32,
          "perturbation": pl.String, "query_id": pl.String, "metric": pl.String, "value": pl.Float64}


def agg(variant, metric, value, *, pert="random_shuffle", task="rerank", dataset="dl19", query=None):
    return {"dataset": dataset, "task": task, "variant": variant, "seed": None, "perturbation": pert,
            "query_id": query, "metric": metric, "value": value}


def cell(variant, metric, value, **kw):
    """An aggregate row and one per-query row (cells count queries from the per-query rows)."""
    return [agg(variant, metric, value, **kw), agg(variant, metric, value, query="q1", **kw)]


def variants(**specs) -> dict[str, Variant]:
    base = {"scorer": "transformers", "chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 4}
    return {name: Variant.checked({**base, **spec}, name) for name, spec in specs.items()}


def smollm2_like(variant="ots", *, tau=0.52, p_value=0.001, share=0.32, profile=(0.4, -0.1, -0.3)):
    """The DL19 picture of the issue: 0.41 on the first-stage order, 0.28 over the shuffles."""
    rows = cell(variant, "ndcg@10", 0.41, pert="first_stage")
    rows += cell(variant, "tau_psi", tau) + cell(variant, "jaccard", 0.33)
    for metric, value in (("ndcg10_shuffle_mean", 0.28), ("ndcg10_shuffle_worst", 0.21),
                          ("ndcg10_shuffle_best", 0.37), ("var_share_slot", share), ("slot_p_value", p_value),
                          ("slot_share_chance", 0.05), ("spearman_score_grade", 0.3)):
        rows.append(agg(variant, metric, value))
    rows += [agg(variant, f"slot_centred_mean_s{k:02d}", v) for k, v in enumerate(profile)]
    return rows


def note_of(rows, **specs) -> dict:
    table, _ = build_table1(pl.DataFrame(rows, schema=SCHEMA), variants(**specs))
    return table.row(0, named=True)


def test_the_verdict_says_order_dependence_the_shuffled_ndcg_and_the_decision():
    row = note_of(smollm2_like(), ots={"label": "Off the shelf"})
    assert row["note"].startswith(
        "order-dependent: rankings at chance (tau-PSI 0.52), scores follow the slot (slot 1 favoured); "
        "nDCG@10 0.21 to 0.37 over shuffles (mean 0.28) against 0.41 on the first-stage order; "
        "kept sets overlap 0.33 between shuffles (Jacc.). Flags: chance (rerank); slot 1+ (rerank)")
    # the same numbers as CSV columns beside the first-stage pass
    assert (row["rerank_ndcg10"], row["rerank_ndcg10_shuffle_mean"], row["rerank_ndcg10_shuffle_worst"],
            row["rerank_ndcg10_shuffle_best"]) == pytest.approx((0.41, 0.28, 0.21, 0.37))


def test_a_first_slot_bonus_under_half_the_variance_is_named_by_the_test():
    """Slot share 0.32 (under the old 0.5 rule) with p = 0.001: the note names the slot."""
    row = note_of(smollm2_like("bonus", tau=0.3, share=0.32), bonus={"label": "Bonus"})
    assert "scores follow the slot (slot 1 favoured)" in row["note"] and "slot 1+ (rerank)" in row["note"]
    # a p-value above the test's level names nothing, whatever the share
    quiet = note_of(smollm2_like("bonus", tau=0.3, share=0.9, p_value=0.2), bonus={"label": "Bonus"})
    assert "slot" not in quiet["note"]


def test_a_penalised_slot_is_the_one_furthest_from_zero():
    row = note_of(smollm2_like("v", tau=0.3, profile=(0.1, 0.2, -0.45)), v={"label": "V"})
    assert "(slot 3 penalised)" in row["note"] and "slot 3- (rerank)" in row["note"]


@pytest.mark.parametrize("tau, words", [
    (0.0, "order-invariant: every shuffle gives the same ranking"),
    (0.049, "nearly order-invariant: rankings barely move over shuffles (tau-PSI 0.05)"),
    (0.05, "order-dependent: rankings move over shuffles (tau-PSI 0.05)"),
    (0.449, "order-dependent: rankings move over shuffles (tau-PSI 0.45)"),
    (0.45, "order-dependent: rankings at chance (tau-PSI 0.45)"),
    (0.551, "order-dependent: rankings further apart than chance (tau-PSI 0.55)"),
])
def test_each_verdict_at_its_threshold(tau, words):
    rows = cell("v", "ndcg@10", 0.5, pert="first_stage") + cell("v", "tau_psi", tau)
    assert note_of(rows, v={"label": "V"})["note"].startswith(words + ";")


def test_a_degenerate_cell_says_why_in_plain_words_and_what_to_change():
    rows = cell("v", "ndcg@10", 0.5, pert="first_stage") + cell("v", "tau_psi", 0.2)
    rows += [agg("v", "jaccard", 0.98)] + [agg("v", "jaccard", 0.98, query=f"q{i}") for i in range(4)]
    rows += [agg("v", "warn_few_test_queries", 1.0), agg("v", "warn_retention_high", 1.0)]
    note = note_of(rows, v={"label": "V"})["note"]
    assert "kept sets overlap" not in note  # a degenerate Jaccard is not read as stable
    assert note.endswith(
        "Jacc. not informative: mean retention above 0.90 (dl19), only 4 test queries (dl19); to fix: retrieve "
        "deeper (k_input, candidates.k) and use at least 20 queries (max_queries; half are test queries). "
        "Flags: degenerate (Jacc.)")
    assert set(DEGENERATE_FIXES) == set(DEGENERATE_FLAGS)  # every rule has its remedy


def test_design_rows_read_m_b_and_depth_from_the_scores():
    """Query a: 5 candidates, 3 shuffles in prompts of 3 + 2; query b: 4 candidates, 3 shuffles."""
    rows = []
    for q, n in (("a", 5), ("b", 4)):
        rows += [(q, f"{q}{d}", "first_stage", 0, d // 3) for d in range(n)]
        rows += [(q, f"{q}{d}", "random_shuffle", m, d // 3) for m in range(3) for d in range(n)]
    scores = pl.DataFrame(rows, schema=["query_id", "doc_id", "perturbation", "presentation", "prompt"], orient="row")
    got = {metric: value for _, _, metric, value in design_rows(scores)}
    assert got == {"shuffles_per_query": 3.0, "prompt_width": 3.0, "candidates_per_query": 4.5}


def test_the_footnote_gives_m_b_depth_and_queries_and_links_the_methods_pages(tmp_path):
    rows = smollm2_like()
    rows += [agg("ots", "shuffles_per_query", 5.0), agg("ots", "prompt_width", 20.0),
             agg("ots", "candidates_per_query", 20.0)]
    rows += [agg("ots", "ndcg@10", 0.4, pert="first_stage", query=f"q{i}") for i in range(2, 9)]
    path = write_table(pl.DataFrame(rows, schema=SCHEMA), tmp_path / "m.parquet", "metrics")
    out = tmp_path / "results"
    out.mkdir()
    write_table1([path], variants(ots={"label": "Off the shelf"}), out / "t.csv", out / "table1.md", out / "c.csv")
    md = (out / "table1.md").read_text()
    assert ("Run: M = 5 shuffles per query; B = 20 candidates per prompt; depth 20 candidates per query; "
            "queries 8 rerank (1 on the test half).") in md
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", md)
    assert links and all(link.endswith(".md") for link in links)
    # the legend defines each flag used, once, and links its page
    assert md.count("- **chance**:") == 1 and md.count("- **slot k+ / slot k-**:") == 1 and "- **ties**" not in md


def test_every_flag_links_an_existing_methods_page_and_anchor():
    for flag in FLAGS.values():
        page, _, anchor = flag.page.partition("#")
        text = (REPO / "docs" / "methods" / page).read_text()
        if anchor:
            headings = [re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-")
                        for h in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)]
            assert anchor in headings, (flag.mark, anchor)
    assert table1_notes.legend([], "x/") == ""
