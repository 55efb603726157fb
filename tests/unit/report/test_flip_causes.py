"""Table 1's flip causes: a cell pools its runs' ledger counts (counts add, then shares), the counts
file carries them, table1.md lists them per row, and the slot flag follows the permutation test."""

from __future__ import annotations

import polars as pl
import pytest

from presdep.config.records import Variant
from presdep.config import SCHEMA_PATH, load_yaml
from presdep.report import counts_columns, diagnosis, flip_causes
from presdep.report.tables import build_table1, to_markdown

SCHEMA = {"dataset": pl.String, "task": pl.String, "variant": pl.String, "seed": pl.Int32,
          "perturbation": pl.String, "query_id": pl.String, "metric": pl.String, "value": pl.Float64}
VARIANT = {"chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 4,
           "scorer": "transformers", "model": "m", "tasks": ["rerank"]}


def _ledger_rows(dataset: str, counts: dict[str, float], flips: float) -> list[tuple]:
    rows = [(dataset, "rerank", "v", None, "flip_ledger", None, "retained_flips", flips)]
    rows += [(dataset, "rerank", "v", None, "flip_ledger", None, f"retained_{c}", counts.get(c, 0.0))
             for c in ("tie", "noise", "parse", "slot", "companions", "content")]
    # noise was testable in dataset b only, parse and companions nowhere
    rows += [(dataset, "rerank", "v", None, "flip_ledger", None, f"retained_{c}_tested", tested)
             for c, tested in (("tie", flips), ("noise", flips if dataset == "b" else 0.0), ("parse", 0.0),
                               ("slot", flips), ("companions", 0.0))]
    return rows


def _metrics() -> pl.DataFrame:
    rows = [("a", "rerank", "v", None, "random_shuffle", None, "jaccard", 0.5),
            ("b", "rerank", "v", None, "random_shuffle", None, "jaccard", 0.7),
            ("a", "rerank", "v", None, "random_shuffle", "q1", "jaccard", 0.5),
            ("b", "rerank", "v", None, "random_shuffle", "q2", "jaccard", 0.7)]
    rows += _ledger_rows("a", {"slot": 30, "content": 10}, 40)
    rows += _ledger_rows("b", {"noise": 5, "content": 5}, 10)
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


def test_a_cell_pools_its_datasets_by_adding_counts():
    counts = flip_causes.ledger_counts(_metrics())
    got = flip_causes.cell_causes(counts, "v", "rerank_jaccard")
    # 50 flips in all: slot 30, content 15, noise 5 (not the mean of the two datasets' shares)
    assert got == {"flips": 50.0, "flip_tie": 0.0, "flip_noise": 0.1, "flip_parse": 0.0, "flip_slot": 0.6,
                   "flip_companions": 0.0, "flip_content": 0.3, "flip_untested": "parse companions"}
    assert flip_causes.cell_causes(counts, "v", "rerank_ndcg10")["flips"] is None, "no decision cell"
    assert flip_causes.causes_text(got) == ("50 flips: noise 10%, slot 60%, not explained by an additive slot "
                                            "effect 30% (parse, companions untested)")


def test_the_counts_file_and_table1_md_carry_the_causes():
    variants = {"v": Variant.checked({**VARIANT, "label": "My scorer"}, name="v")}
    table, counts = build_table1(_metrics(), variants)
    row = counts.filter(pl.col("column") == "rerank_jaccard").row(0, named=True)
    assert (row["flips"], row["flip_slot"], row["flip_content"]) == (50.0, 0.6, 0.3)
    md = to_markdown(table, flips={"My scorer": {"rerank_jaccard": {c: row[c] for c in flip_causes.CAUSE_COLUMNS}}})
    lines = md.splitlines()
    why = [i for i, ln in enumerate(lines) if ln.startswith("Why decisions flipped")]
    assert len(why) == 1 and "[flip ledger](../docs/methods/flip-ledger.md)" in lines[why[0]]
    assert lines[why[0] + 1] == ("- My scorer: Jacc. 50 flips: noise 10%, slot 60%, not explained by an additive slot "
                                 "effect 30% (parse, companions untested)")


def test_the_remainder_is_named_for_what_it_is_with_the_keys_that_test_what_it_may_hide():
    """The stored cause "content" means: the additive slot fit did not reproduce the flip (and no earlier
    test did). A person reads that, on a slot-driven row too, and the keys that would test noise and
    companions; the stored key and the counts column stay."""
    causes = {"flips": 10.0, **{f"flip_{c}": 0.0 for c in ("tie", "noise", "parse", "companions")},
              "flip_slot": 0.7, "flip_content": 0.3, "flip_untested": "noise parse companions"}
    said = flip_causes.causes_text(causes)
    assert "content" not in said and "not explained by an additive slot effect 30%" in said
    header = flip_causes.causes_line({"V": {"rerank_jaccard": causes}}, ["rerank_jaccard"]).splitlines()[1]
    assert "content" not in header and "not explained by an additive slot effect" in header
    assert "`protocol.noise_rereads: 2` or more tests noise" in header
    assert "`within_chunk` in `protocol.perturbations` tests companions" in header
    assert "flip_content" in flip_causes.CAUSE_COLUMNS
    assert "additive slot effect" in counts_columns.COLUMNS["flip_content"][1]
    assert "noise_rereads" in load_yaml(SCHEMA_PATH)["properties"]["protocol"]["properties"]  # the key exists


@pytest.mark.parametrize("share, p, said", [
    (0.32, 0.001, True),   # a share under 0.5 with a small p-value: the slot matters
    (0.62, 0.001, True),
    (0.62, 0.2, False),    # the test, not the 0.5 share, decides
    (0.62, None, True),    # older metrics without the test: the share rule
    (0.32, None, False),
])
def test_the_slot_flag_follows_the_permutation_test(share, p, said):
    found = diagnosis.findings(0.2, {"var_share_slot": share, "slot_p_value": p,
                                     "slot_share_chance": 0.1 if p is not None else None, "spearman_score_grade": 0.5})
    assert ("slot" in found) is said, found


def test_a_cells_slot_p_value_is_bonferroni_over_its_runs():
    tests = pl.DataFrame({"variant": ["v", "v", "w"], "task": ["rerank"] * 3, "dataset": ["a", "b", "a"],
                          "seed": [None, None, None], "slot_p_value": [0.004, 0.5, 0.2],
                          "slot_share_chance": [0.1, 0.3, 0.2]})
    assert diagnosis.slot_test_cell(tests, "v", "rerank") == {"slot_p_value": 0.008, "slot_share_chance": pytest.approx(0.2)}
    assert diagnosis.slot_test_cell(tests, "x", "rerank") == {"slot_p_value": None, "slot_share_chance": None}
