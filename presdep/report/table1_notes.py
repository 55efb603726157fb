"""What a Table 1 row's note says: a verdict in plain words, then grouped flags (table1.md).

A note answers two questions in its first line: does the scorer depend on the order, and
does that reach its decisions? The verdict reads the row's headline task (reranking where
the row has it, else QA, else responses):

- how far its tau-PSI is from 0 (order-invariant) and from 0.5 (the chance level of two
  unrelated rankings, presdep.report.diagnosis), and the slot when the slot test names one;
- nDCG@k over the M shuffles (mean, and the mean of each query's worst and best shuffle)
  against the one pass over the first-stage order;
- the task's decision cell in words, or "not informative" when that cell is degenerate.

Then each degenerate decision cell says why in plain words and what to change, and the
row's flags follow as short marks grouped by flag (``flags: chance (rerank, QA); slot 1+
(rerank)``), each defined once in the legend under the table with its methods page.

A note is at most NOTE_LIMIT characters, so the table stays readable: a note that is longer
in full words is said again in short words (the legend and the counts file keep the detail),
and one still too long is cut at a word boundary before its flags and ends with MORE, a
pointer to the counts file (never a word cut in half).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from presdep.contracts.columns import COLUMN_TITLES, TABLE1_COLUMNS
from presdep.metrics.rerank_rows import DEGENERATE_FLAGS, MIN_TEST_QUERIES, RETENTION_HIGH, RETENTION_LOW
from presdep.report.diagnosis import (
    AGAINST_QRELS_ALPHA,
    AT_CHANCE,
    CHANCE_TAU_PSI,
    NO_GRADE_SIGNAL,
    SLOT_ALPHA,
    SLOT_DRIVEN,
)

# The row's tasks in the order the verdict looks for its headline.
TASKS = ("rerank", "qa", "response")
TASK_NAMES = {"rerank": "rerank", "qa": "QA", "response": "resp"}
TAU_COLUMN = {t: c for t in TASKS for c, s in TABLE1_COLUMNS.items() if s.task == t and s.metric == "tau_psi"}
QUALITY_COLUMN = {t: c for t in TASKS for c, s in TABLE1_COLUMNS.items()
                  if s.task == t and s.metric.startswith("ndcg")}
DECISION_COLUMN = {t: c for t in TASKS for c, s in TABLE1_COLUMNS.items()
                   if s.task == t and s.metric in ("jaccard", "answer_flip", "pair_flip")}
# Below this tau-PSI a ranking "barely moves": one pair in 20 swaps between two shuffles.
NEARLY_INVARIANT = 0.05
# The longest note, in characters: a table cell a reader takes in at a glance (about five lines of
# a wide Markdown table); what does not fit lives in the legend and the counts file.
NOTE_LIMIT = 400
# The end of a note cut to NOTE_LIMIT: where the rest of it is.
MORE = " … (table1_counts.csv)"

# A degenerate decision cell, in plain words: what to change so that it measures the scorer (why
# each rule makes the number say little: docs/methods/jaccard.md, "When the number means nothing").
DEGENERATE_FIXES = {
    "warn_threshold_keeps_all": "retrieve deeper (k_input, candidates.k)",
    "warn_threshold_keeps_none": "use more development queries (max_queries)",
    "warn_threshold_grid_edge": "retrieve deeper (k_input, candidates.k)",
    "warn_retention_high": "retrieve deeper (k_input, candidates.k)",
    "warn_retention_low": "keep fewer candidates per query (k_input)",
    "warn_few_test_queries": f"use at least {2 * MIN_TEST_QUERIES} queries (max_queries; half are test queries)",
}
# The same in short words, for a note too long in full (the legend's "degenerate" entry names the keys).
SHORT_REASONS = {
    "warn_threshold_keeps_all": "t* keeps all",
    "warn_threshold_keeps_none": "t* keeps none",
    "warn_threshold_grid_edge": "t* at grid edge",
    "warn_retention_high": f"retention > {RETENTION_HIGH:.2f}",
    "warn_retention_low": f"retention < {RETENTION_LOW:.2f}",
    "warn_few_test_queries": f"< {MIN_TEST_QUERIES} test queries",
}
SHORT_FIXES = {
    "warn_threshold_keeps_all": "retrieve deeper",
    "warn_threshold_keeps_none": "more queries",
    "warn_threshold_grid_edge": "retrieve deeper",
    "warn_retention_high": "retrieve deeper",
    "warn_retention_low": "fewer candidates",
    "warn_few_test_queries": f"at least {2 * MIN_TEST_QUERIES} queries",
}
_REASON_OF = {text: metric for metric, text in DEGENERATE_FLAGS.items()}


@dataclass(frozen=True)
class Flag:
    mark: str
    meaning: str
    page: str  # relative to docs/methods/
    title: str  # the link's text


FLAGS = {
    "chance": Flag("chance", f"tau-PSI within {AT_CHANCE} of {CHANCE_TAU_PSI}, the value of two unrelated "
                   "rankings: the order decides as much as the documents", "tau-psi.md", "tau-PSI"),
    "slot": Flag("slot k+ / slot k-", f"the slot test finds a slot effect (permutation p < {SLOT_ALPHA}, "
                 "Bonferroni over datasets and seeds; metrics without the test: the slot explains at least "
                 f"{SLOT_DRIVEN:.0%} of the score variance); k is the slot whose document-centred mean score is "
                 "furthest from 0, + favoured, - penalised",
                 "position.md#does-the-slot-matter-presdepmetricsslot_test", "position"),
    "no grade signal": Flag("no grade signal", "the shuffle-averaged score does not follow the qrels "
                            f"(|Spearman with grade| < {NO_GRADE_SIGNAL})", "position.md", "position"),
    "against the qrels": Flag("against the qrels", "the shuffle-averaged score runs against the qrels: Spearman "
                              f"with grade <= -{NO_GRADE_SIGNAL} and a one-sided permutation test within queries "
                              f"rejects rho >= 0 (p < {AGAINST_QRELS_ALPHA}, Bonferroni over datasets and seeds), "
                              "so averaging shuffles lowers nDCG",
                              "position.md#does-the-score-follow-the-qrels", "position"),
    "ties": Flag("ties", "some document pairs tie: tau-a orders them by presented position, and the cell "
                 "shows tau-b beside it", "tau-psi.md#ties-tie_rate", "ties"),
    "degenerate": Flag("degenerate", "the decision cell reflects the threshold rule, not the scorer (the "
                       "note says why and what to change: retrieve deeper with k_input or candidates.k, use more "
                       f"queries with max_queries (at least {2 * MIN_TEST_QUERIES}: half are test queries), or keep "
                       "fewer candidates with k_input; the counts file's warnings name each dataset and seed)",
                       "jaccard.md#when-the-number-means-nothing", "Jaccard"),
    "tie-broken": Flag("tie-broken", "tau-PSI > 0 although the scorer declares order_invariant: tied scores "
                       "broken by presented position", "tau-psi.md#ties-tie_rate", "ties"),
}


@dataclass
class RowFacts:
    """What one row's note is made from (tables.build_table1 fills it from the cells)."""

    values: Mapping[str, float | None]          # every Table 1 and CSV column of the row
    shuffled: Mapping[str, tuple[float | None, float | None, float | None]] = field(default_factory=dict)
    # task -> (mean, worst, best) nDCG over the shuffles
    chance: list[str] = field(default_factory=list)          # tau-PSI columns at chance
    slots: dict[str, tuple[int, float]] = field(default_factory=dict)  # tau column -> (1-based slot, centred mean)
    no_grade: list[str] = field(default_factory=list)
    against_qrels: list[str] = field(default_factory=list)
    ties: list[str] = field(default_factory=list)
    tie_broken: list[str] = field(default_factory=list)
    degenerate: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # column -> [(reason, dataset)]
    test_queries: dict[str, int] = field(default_factory=dict)  # decision column -> its query count
    integer_grades: bool = False

    def merged(self, other: RowFacts, values: Mapping[str, float | None]) -> RowFacts:
        """The facts of a row merged from two variants of one label (their cells are disjoint)."""
        return RowFacts(values=values, shuffled={**self.shuffled, **{t: v for t, v in other.shuffled.items()
                                                                     if any(_defined(x) for x in v)}},
                        chance=self.chance + other.chance, slots={**self.slots, **other.slots},
                        no_grade=self.no_grade + other.no_grade, against_qrels=self.against_qrels + other.against_qrels,
                        ties=self.ties + other.ties,
                        tie_broken=self.tie_broken + other.tie_broken,
                        degenerate={**self.degenerate, **other.degenerate},
                        test_queries={**self.test_queries, **other.test_queries},
                        integer_grades=self.integer_grades or other.integer_grades)


def _defined(x: float | None) -> bool:
    return x is not None and not math.isnan(x)


def headline_task(values: Mapping[str, float | None]) -> str | None:
    """The first task of TASKS whose quality or tau-PSI cell the row fills."""
    for task in TASKS:
        if _defined(values.get(QUALITY_COLUMN[task])) or _defined(values.get(TAU_COLUMN[task])):
            return task
    return None


def slot_mark(slot: int, centred: float) -> str:
    """'slot 1+' (favoured) or 'slot 4-' (penalised); 'slot effect' where no profile names a slot."""
    return f"slot {slot}{'+' if centred > 0 else '-'}" if slot else "slot effect"


def _order_words(facts: RowFacts, task: str, short: bool = False) -> str:
    taus = [facts.values.get(TAU_COLUMN[t]) for t in TASKS]
    tau = facts.values.get(TAU_COLUMN[task])
    if not _defined(tau):
        if not facts.integer_grades:
            return ""
        return "order dependence not measured" if short else "order dependence not measured (tau-PSI not reported)"
    if all(not _defined(t) or t == 0 for t in taus):
        return "order-invariant" if short else "order-invariant: every shuffle gives the same ranking"
    tau_b = facts.values.get(f"{TAU_COLUMN[task]}_b")
    if tau > 0 and tau_b == 0:
        if short:
            return f"order-invariant scores (tau-PSI {tau:.2f} from ties broken by position)"
        return (f"order-invariant scores: tau-PSI {tau:.2f} comes only from tied scores broken by presented "
                "position (tau-PSI-b 0.00)")
    words = _ORDER_WORDS[_order_class(tau)][short].format(tau=tau)
    slot = facts.slots.get(TAU_COLUMN[task])
    if short:
        if slot is not None:
            words += f", slot {slot[0]} {'favoured' if slot[1] > 0 else 'penalised'}" if slot[0] else ", slot effect"
        return words
    if slot is not None:
        named = f" (slot {slot[0]} {'favoured' if slot[1] > 0 else 'penalised'})" if slot[0] else ""
        words += (f", though the slot moves the scores{named}" if tau < NEARLY_INVARIANT
                  else f", scores follow the slot{named}")
    return words


def _order_class(tau: float) -> str:
    if tau < NEARLY_INVARIANT:
        return "nearly"
    if abs(tau - CHANCE_TAU_PSI) <= AT_CHANCE:
        return "chance"
    return "beyond" if tau > CHANCE_TAU_PSI else "moves"


# How far a tau-PSI is from invariance and from chance, in words: (full, short) per class.
_ORDER_WORDS = {
    "nearly": ("nearly order-invariant: rankings barely move over shuffles (tau-PSI {tau:.2f})",
               "nearly order-invariant (tau-PSI {tau:.2f})"),
    "chance": ("order-dependent: rankings at chance (tau-PSI {tau:.2f})", "order-dependent, at chance (tau-PSI {tau:.2f})"),
    "beyond": ("order-dependent: rankings further apart than chance (tau-PSI {tau:.2f})",
               "order-dependent, beyond chance (tau-PSI {tau:.2f})"),
    "moves": ("order-dependent: rankings move over shuffles (tau-PSI {tau:.2f})", "order-dependent (tau-PSI {tau:.2f})"),
}


def _quality_words(facts: RowFacts, task: str, short: bool = False) -> str:
    column = QUALITY_COLUMN[task]
    first = facts.values.get(column)
    mean, worst, best = facts.shuffled.get(task, (None, None, None))
    title = "nDCG@1" if task == "response" else "nDCG@10"
    on_first = "" if not _defined(first) else f"{first:.2f} {'first-stage' if short else 'on the first-stage order'}"
    if not (_defined(mean) and _defined(worst) and _defined(best)):
        return f"{title} {on_first}" if on_first else ""
    if _defined(first) and worst == best == first:
        return f"{title} {first:.2f} in every order"
    if short:
        spread = f"{title} {worst:.2f}-{best:.2f} over shuffles (mean {mean:.2f})"
        return f"{spread}, {on_first}" if on_first else spread
    spread = f"{title} {worst:.2f} to {best:.2f} over shuffles (mean {mean:.2f})"
    return f"{spread} against {on_first}" if on_first else spread


def _decision_words(facts: RowFacts, task: str, short: bool = False) -> str:
    column = DECISION_COLUMN[task]
    value = facts.values.get(column)
    if not _defined(value):
        return ""
    if column in facts.degenerate:  # the next sentence says why and what to change
        return ""
    if short:
        return f"{COLUMN_TITLES[column]} {value:.2f}"
    return {"rerank": f"kept sets overlap {value:.2f} between shuffles (Jacc.)",
            "qa": f"the reader's answer flips {value:.2f} (ans. flip)",
            "response": f"the preferred pair flips {value:.2f} (pair flip)"}[task]


def verdict(facts: RowFacts, short: bool = False) -> str:
    """The note's first line ('' for a row without any cell); ``short``: in short words."""
    task = headline_task(facts.values)
    if task is None:
        return ""
    parts = [_order_words(facts, task, short), _quality_words(facts, task, short), _decision_words(facts, task, short)]
    return "; ".join(p for p in parts if p)


def _short_degenerate_words(facts: RowFacts) -> list[str]:
    """Per group of degenerate decision cells with the same reasons: the reasons in short words, their
    datasets once, and the remedies in short words (the legend names the config keys)."""
    said: dict[str, list[str]] = {}
    order = list(DEGENERATE_FLAGS)
    for column, reasons in facts.degenerate.items():
        places: dict[str, set[str]] = {}
        for reason, dataset in reasons:
            places.setdefault(_REASON_OF[reason], set()).add(dataset)
        count = facts.test_queries.get(column)
        by_places: dict[str, list[str]] = {}  # reasons with the same datasets share one "(dl19, covid)"
        for m in sorted(places, key=order.index):
            why = f"{count} test queries" if m == "warn_few_test_queries" and count else SHORT_REASONS[m]
            by_places.setdefault(", ".join(sorted(places[m])), []).append(why)
        why = ", ".join(f"{', '.join(whys)} ({where})" for where, whys in by_places.items())
        fixes = dict.fromkeys(SHORT_FIXES[m] for m in sorted(places, key=order.index))
        said.setdefault(f"{why}; fix: {', '.join(fixes)}", []).append(column)
    return [f"{', '.join(COLUMN_TITLES[c] for c in columns)} not informative: {text}" for text, columns in said.items()]


def degenerate_words(facts: RowFacts, short: bool = False) -> list[str]:
    """Per degenerate decision cell: why, in plain words (each rule with its datasets), then what to
    change, each remedy once; ``short``: in short words, cells with the same reasons together."""
    if short:
        return _short_degenerate_words(facts)
    out = []
    order = list(DEGENERATE_FLAGS.values())
    for column, reasons in facts.degenerate.items():
        by_reason: dict[str, list[str]] = {}
        for reason, dataset in reasons:
            places = by_reason.setdefault(reason, [])
            if dataset not in places:
                places.append(dataset)
        said, fixes = [], []
        for reason, places in sorted(by_reason.items(), key=lambda kv: order.index(kv[0])):
            metric = _REASON_OF[reason]
            count = facts.test_queries.get(column)
            why = f"only {count} test queries" if metric == "warn_few_test_queries" and count else reason
            said.append(f"{why} ({', '.join(sorted(places))})")
            if DEGENERATE_FIXES[metric] not in fixes:
                fixes.append(DEGENERATE_FIXES[metric])
        out.append(f"{COLUMN_TITLES[column]} not informative: {', '.join(said)}; to fix: {' and '.join(fixes)}")
    return out


def _tasks_of(columns: Sequence[str]) -> str:
    return ", ".join(TASK_NAMES[TABLE1_COLUMNS[c].task] if c in TABLE1_COLUMNS else c for c in columns)


def flag_marks(facts: RowFacts) -> list[tuple[str, str]]:
    """(flag key, mark with its tasks) for each flag the row raises, in FLAGS order."""
    out = []
    if facts.chance:
        out.append(("chance", f"chance ({_tasks_of(facts.chance)})"))
    by_slot: dict[str, list[str]] = {}
    for column, (slot, centred) in facts.slots.items():
        by_slot.setdefault(slot_mark(slot, centred), []).append(column)
    if by_slot:
        out.append(("slot", "; ".join(f"{mark} ({_tasks_of(cols)})" for mark, cols in by_slot.items())))
    if facts.no_grade:
        out.append(("no grade signal", f"no grade signal ({_tasks_of(facts.no_grade)})"))
    if facts.against_qrels:
        out.append(("against the qrels", f"against the qrels ({_tasks_of(facts.against_qrels)})"))
    if facts.ties:
        out.append(("ties", f"ties ({_tasks_of(facts.ties)})"))
    if facts.degenerate:
        out.append(("degenerate", f"degenerate ({', '.join(COLUMN_TITLES[c] for c in facts.degenerate)})"))
    if facts.tie_broken:
        out.append(("tie-broken", f"tie-broken ({_tasks_of(facts.tie_broken)})"))
    return out


def body(facts: RowFacts, lead: str = "", short: bool = False) -> str:
    """The note before its flags: verdict, then the config's own note or the skip reason (``lead``),
    the degenerate cells' sentences and the integer-grades sentence; ``short``: in short words."""
    parts = [p for p in (verdict(facts, short), lead, *degenerate_words(facts, short)) if p]
    if facts.integer_grades and lead.find("tau-PSI not reported") < 0:
        parts.append("tau-PSI not reported (integer grades)" if short else
                     "tau-PSI not reported (integer grades: most of the order is tie-breaking)")
    return ". ".join(parts)


def _joined(text: str, flags: str) -> str:
    return f"{text}. {flags}" if text and flags else text or flags


def fit(text: str, limit: int = NOTE_LIMIT) -> str:
    """``text`` when it has at most ``limit`` characters; else its longest start that ends at a word
    boundary (outside parentheses where it can) followed by MORE, within ``limit``."""
    if len(text) <= limit:
        return text
    room = limit - len(MORE)
    spaces = [i for i in range(min(room, len(text) - 1), 0, -1) if text[i] == " "]
    balanced = [i for i in spaces if text[:i].count("(") == text[:i].count(")")]
    cut = (balanced or spaces or [room])[0]  # no space at all: one word longer than the note
    return text[:cut].rstrip(" ,;:.") + MORE


def note(facts: RowFacts, lead: str = "", limit: int = NOTE_LIMIT) -> tuple[str, list[str]]:
    """(the row's note, the flag keys it uses): :func:`body`, then ``Flags: ...``; at most ``limit``
    characters: in short words when the full ones are longer, and then, if still too long, the body
    cut by :func:`fit` (the flags kept whole while they leave room for it)."""
    marks = flag_marks(facts)
    flags = f"Flags: {'; '.join(m for _, m in marks)}" if marks else ""
    for short in (False, True):
        text = _joined(body(facts, lead, short), flags)
        if len(text) <= limit:
            return text, [k for k, _ in marks]
    room = limit - len(flags) - len(". ")
    text = _joined(fit(body(facts, lead, True), room), flags) if room > 2 * len(MORE) else fit(text, limit)
    return text, [k for k, _ in marks]


def legend(used: Sequence[str], docs: str) -> str:
    """One line per flag used in the table, each linking its methods page (``docs``: the path
    from table1.md to docs/methods/)."""
    keys = [k for k in FLAGS if k in set(used)]
    if not keys:
        return ""
    lines = [f"- **{FLAGS[k].mark}**: {FLAGS[k].meaning} ([{FLAGS[k].title}]({docs}{FLAGS[k].page}))." for k in keys]
    return "\nFlags:\n" + "\n".join(lines) + "\n"


__all__ = ["DEGENERATE_FIXES", "FLAGS", "MORE", "NEARLY_INVARIANT", "NOTE_LIMIT", "SHORT_FIXES", "SHORT_REASONS",
           "RowFacts", "body", "degenerate_words", "fit", "flag_marks", "headline_task", "legend", "note", "slot_mark",
           "verdict"]
