"""The position profile figure reads the metrics' slot rows, names runs by their Table 1 labels,
and is byte-stable; the identity scorer's line is flat at 0."""

from __future__ import annotations

import re

import numpy as np
import polars as pl
import pytest
from scorers_tiny import VARIANT, score_then_metrics

from presdep.report.position_figure import position_figure, profiles, slot_ticks
from presdep.scoring.backends import IdentityScorer


def _slot_rows(variant, seed, dataset, means, share):
    rows = []
    for s, m in enumerate(means):
        rows += [(dataset, "rerank", variant, seed, "random_shuffle", None, f"slot_centred_mean_s{s:02d}", m),
                 (dataset, "rerank", variant, seed, "random_shuffle", None, f"slot_centred_ci95_s{s:02d}", 0.1)]
    rows.append((dataset, "rerank", variant, seed, "random_shuffle", None, "var_share_slot", share))
    return rows


def _frame(rows):
    return pl.DataFrame(rows, schema={"dataset": pl.String, "task": pl.String, "variant": pl.String,
                                      "seed": pl.Int32, "perturbation": pl.String, "query_id": pl.String,
                                      "metric": pl.String, "value": pl.Float64}, orient="row")


def test_profiles_average_datasets_and_use_labels():
    m = _frame(_slot_rows("off_the_shelf", None, "a", [1.0, 0.0, -1.0], 0.8)
               + _slot_rows("off_the_shelf", None, "b", [0.5, 0.0, -0.5], 0.6)
               + _slot_rows("oc_sft", 42, "a", [0.0, 0.0, 0.0], 0.0))
    p = profiles(m, {"off_the_shelf": "Off the shelf", "oc_sft": "OC-SFT"})
    off = p.filter(pl.col("run") == "off_the_shelf").sort("slot")
    assert off["mean"].to_list() == pytest.approx([0.75, 0.0, -0.75])  # mean over the two datasets
    assert off["slot_share"][0] == pytest.approx(0.7) and off["label"][0] == "Off the shelf"
    assert p.filter(pl.col("run") == "oc_sft/seed42")["label"][0] == "OC-SFT/seed42"


def test_the_figure_is_drawn_byte_stable_and_the_identity_line_is_flat(tmp_path):
    proto = {"seed": 13, "M": 3, "B": 6, "perturbations": ["random_shuffle"], "max_doc_chars": 200}
    _, metrics = score_then_metrics(tmp_path, {**VARIANT, "scorer": "identity"}, proto, "rerank",
                                    scorer=IdentityScorer())
    p = profiles(metrics, {"identity": "First stage"})
    assert p.height == 6 and np.allclose(p["mean"].to_numpy(), 0.0) and p["slot_share"][0] == 0.0
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        position_figure(p, d / "p.svg", d / "p.png")
    assert (a / "p.svg").read_bytes() == (b / "p.svg").read_bytes()
    assert (a / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the legend: the share, its chance level at this M and depth, and the permutation test's p-value
    chance = p["slot_chance"][0]
    assert 0 < chance < 1 and p["slot_p"][0] == 1.0
    assert f"First stage (slot share 0.00, chance {chance:.2f}; p = 1)" in (a / "p.svg").read_text()


def test_no_slot_rows_say_so_in_the_figure(tmp_path):
    position_figure(profiles(_frame([])), tmp_path / "p.svg", tmp_path / "p.png")
    assert "no slot profile" in (tmp_path / "p.svg").read_text()


def test_the_figure_numbers_slots_from_1(tmp_path):
    """Slots read by people count from 1, as Table 1's flags and Figure 1 count them; the
    metrics' slot_centred_mean_s00 is slot 1."""
    p = profiles(_frame(_slot_rows("off_the_shelf", None, "a", [1.0, 0.0, -1.0], 0.8)), {"off_the_shelf": "OTS"})
    assert p["slot"].to_list() == [0, 1, 2]  # the table keeps the metrics' numbering
    position_figure(p, tmp_path / "p.svg", tmp_path / "p.png")
    svg = (tmp_path / "p.svg").read_text()
    # each tick's group holds its label as a comment (the text is drawn as paths)
    ticks = re.findall(r'<g id="xtick_\d+">.*?<!-- (.*?) -->', svg, re.S)
    assert ticks == ["1", "2", "3"]
    assert "slot in the prompt (1 = shown first)" in svg and "0 = shown first" not in svg


def test_slot_ticks_start_at_1_and_stay_few():
    assert slot_ticks(4) == [1, 2, 3, 4]
    assert slot_ticks(20) == [1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20]
    assert slot_ticks(100) == [1, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
