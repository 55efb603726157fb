"""Table 1's "what this means" note comes from the diagnostics: each statement at its stated
threshold, quoting the number; the counts file carries chance, distance and diagnostics."""

from __future__ import annotations

import polars as pl
import pytest

from presdep.config.records import Variant
from presdep.report import diagnosis
from presdep.report.tables import build_table1

VARIANT = {"chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 4,
           "scorer": "transformers", "model": "m", "tasks": ["rerank"]}


def _metrics(tau, share, rho_slot, rho_grade):
    rows = [("d", "rerank", "v", None, "random_shuffle", None, m, val)
            for m, val in (("tau_psi", tau), ("var_share_slot", share), ("spearman_slot_score", rho_slot),
                           ("spearman_score_grade", rho_grade))]
    rows += [("d", "rerank", "v", None, "random_shuffle", f"q{i}", "tau_psi", tau) for i in range(3)]
    return pl.DataFrame(rows, schema={"dataset": pl.String, "task": pl.String, "variant": pl.String,
                                      "seed": pl.Int32, "perturbation": pl.String, "query_id": pl.String,
                                      "metric": pl.String, "value": pl.Float64}, orient="row")


def test_a_slot_driven_scorer_at_chance_is_flagged_and_the_counts_carry_the_numbers():
    table, counts = build_table1(_metrics(0.512, 0.91, -0.977, -0.02), {"v": Variant.checked(VARIANT, name="v")})
    note = table["note"][0]
    assert note.startswith("order-dependent: rankings at chance (tau-PSI 0.51), scores follow the slot")
    assert note.endswith("Flags: chance (rerank); slot effect (rerank); no grade signal (rerank)")
    assert table["flags"][0] == "chance slot no_grade_signal"
    row = counts.filter(pl.col("column") == "rerank_tau_psi").row(0, named=True)
    assert row["chance"] == 0.5 and row["vs_chance"] == pytest.approx(0.012)
    assert (row["var_share_slot"], row["spearman_slot_score"], row["spearman_score_grade"]) == (0.91, -0.977, -0.02)


@pytest.mark.parametrize("tau, share, rho_grade, said", [
    (0.449, 0.1, 0.5, set()),                    # 0.051 from chance: not at chance
    (0.45, 0.1, 0.5, {"chance"}),                # exactly the band's edge
    (0.2, 0.5, 0.5, {"slot"}),                   # the slot share at its threshold
    (0.2, 0.49, 0.1, set()),                     # below it; |rho| = 0.1 is not below 0.1
    (0.2, 0.1, -0.099, {"no grade signal"}),
])
def test_each_finding_at_its_threshold(tau, share, rho_grade, said):
    assert diagnosis.findings(tau, {"var_share_slot": share, "spearman_slot_score": -0.5,
                                    "spearman_score_grade": rho_grade}) == said
