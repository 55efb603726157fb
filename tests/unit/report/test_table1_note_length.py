"""A Table 1 note has at most NOTE_LIMIT (400) characters: said in short words when the full ones are
longer, and cut at a word boundary before its flags, with a pointer to the counts file, when even
the short words are (presdep.report.table1_notes.note)."""

from __future__ import annotations

from presdep.contracts.columns import TABLE1_COLUMNS
from presdep.metrics.rerank_rows import DEGENERATE_FLAGS
from presdep.report import table1_notes
from presdep.report.table1_notes import FLAGS, MORE, NOTE_LIMIT, SHORT_FIXES, SHORT_REASONS, RowFacts

TAU = ("rerank_tau_psi", "qa_tau_psi", "resp_tau_psi")
DECISIONS = ("rerank_jaccard", "qa_answer_flip", "resp_pair_flip")
DATASETS = ("dl19", "trec-covid", "nfcorpus")


def _values() -> dict[str, float]:
    values = {c: 0.62 for c in TABLE1_COLUMNS}
    values.update({c: 0.52 for c in TAU})
    values.update({f"{c}_b": 0.48 for c in TAU})
    return values


def _longest() -> RowFacts:
    """Every flag raised, every degenerate rule on every decision cell in three datasets."""
    return RowFacts(
        values=_values(), shuffled={t: (0.55, 0.31, 0.78) for t in ("rerank", "qa", "response")},
        chance=list(TAU), slots={"rerank_tau_psi": (12, 0.4), "qa_tau_psi": (6, -0.2), "resp_tau_psi": (2, -0.1)},
        no_grade=["rerank_tau_psi"], against_qrels=["qa_tau_psi", "resp_tau_psi"], ties=list(TAU),
        tie_broken=list(TAU),
        degenerate={c: [(reason, d) for reason in DEGENERATE_FLAGS.values() for d in DATASETS] for c in DECISIONS},
        test_queries={c: 6 for c in DECISIONS})


def test_the_longest_realistic_note_fits_and_is_cut_only_at_a_word_boundary():
    facts = _longest()
    text, keys = table1_notes.note(facts, lead="reranking pool; first-stage BM25 top 100")
    assert len(text) <= NOTE_LIMIT, len(text)
    assert keys == list(FLAGS)  # every flag raised, every one still in the legend
    flags = "Flags: " + "; ".join(mark for _, mark in table1_notes.flag_marks(facts))
    assert text.endswith(". " + flags)  # the flags are kept whole
    kept = text[: -len(". " + flags)]
    assert kept.endswith(MORE)
    kept = kept[: -len(MORE)]
    short = table1_notes.body(facts, "reranking pool; first-stage BM25 top 100", short=True)
    assert short.startswith(kept) and short[len(kept)] in " ,;:."  # ends where a word ends
    assert kept.count("(") == kept.count(")")  # not inside a parenthesis
    assert kept.startswith("order-dependent, at chance (tau-PSI 0.52), slot 12 favoured; nDCG@10 0.31-0.78")


def test_the_default_runs_longest_note_fits_in_short_words():
    """The embedded default's Order-averaged row: 542 characters in full words."""
    values = {**_values(), "rerank_tau_psi": 0.5655, "qa_tau_psi": 0.5926, "resp_tau_psi": 0.6667,
              "rerank_ndcg10": 0.6288}
    facts = RowFacts(
        values=values, shuffled={"rerank": (0.65, 0.50, 0.89)},
        slots={"rerank_tau_psi": (4, 0.3), "qa_tau_psi": (6, -0.2), "resp_tau_psi": (1, 0.5)},
        no_grade=["resp_tau_psi"],
        degenerate={"rerank_jaccard": [(DEGENERATE_FLAGS[m], "synthetic") for m in (
            "warn_threshold_grid_edge", "warn_retention_high", "warn_few_test_queries")]},
        test_queries={"rerank_jaccard": 2})
    full = table1_notes.body(facts) + ". Flags: " + "; ".join(m for _, m in table1_notes.flag_marks(facts))
    assert len(full) > NOTE_LIMIT
    text, _ = table1_notes.note(facts)
    assert len(text) <= NOTE_LIMIT and MORE not in text
    assert text == (
        "order-dependent, beyond chance (tau-PSI 0.57), slot 4 favoured; nDCG@10 0.50-0.89 over shuffles "
        "(mean 0.65), 0.63 first-stage. Jacc. not informative: t* at grid edge, retention > 0.90, 2 test queries "
        "(synthetic); fix: retrieve deeper, at least 20 queries. Flags: slot 4+ (rerank); slot 6- (QA); "
        "slot 1+ (resp); no grade signal (resp); degenerate (Jacc.)")


def test_a_note_that_fits_keeps_its_full_words():
    facts = RowFacts(values={**_values(), "rerank_tau_psi": 0.2}, shuffled={"rerank": (0.5, 0.4, 0.6)})
    text, _ = table1_notes.note(facts)
    assert text == ("order-dependent: rankings move over shuffles (tau-PSI 0.20); nDCG@10 0.40 to 0.60 over "
                    "shuffles (mean 0.50) against 0.62 on the first-stage order; kept sets overlap 0.62 between "
                    "shuffles (Jacc.)")


def test_fit_cuts_before_an_open_parenthesis_and_never_inside_a_word():
    text = "alpha beta gamma (delta epsilon zeta) eta theta iota kappa lambda mu"
    assert table1_notes.fit(text, len(text)) == text
    assert table1_notes.fit(text, 30 + len(MORE)) == "alpha beta gamma" + MORE  # not "(delta epsilon"
    assert table1_notes.fit(text, 14 + len(MORE)) == "alpha beta" + MORE  # not "alpha beta gam"
    assert table1_notes.fit(text, 45 + len(MORE)) == "alpha beta gamma (delta epsilon zeta) eta" + MORE
    assert len(table1_notes.fit("x" * 500, NOTE_LIMIT)) == NOTE_LIMIT  # one word longer than a note


def test_every_degenerate_rule_has_short_words():
    assert set(SHORT_REASONS) == set(DEGENERATE_FLAGS) == set(SHORT_FIXES)
