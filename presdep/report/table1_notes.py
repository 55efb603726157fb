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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from presdep.contracts.columns import COLUMN_TITLES, TABLE1_COLUMNS
from presdep.metrics.rerank_rows import DEGENERATE_FLAGS, MIN_TEST_QUERIES
from presdep.report.diagnosis import AT_CHANCE, CHANCE_TAU_PSI, NO_GRADE_SIGNAL, SLOT_ALPHA, SLOT_DRIVEN

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
    "ties": Flag("ties", "some document pairs tie: tau-a orders them by presented position, and the cell "
                 "shows tau-b beside it", "tau-psi.md#ties-tie_rate", "ties"),
    "degenerate": Flag("degenerate", "the decision cell reflects the threshold rule, not the scorer (the "
                       "note says why and what to change)", "jaccard.md#when-the-number-means-nothing",
                       "Jaccard"),
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
                        no_grade=self.no_grade + other.no_grade, ties=self.ties + other.ties,
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


def _order_words(facts: RowFacts, task: str) -> str:
    taus = [facts.values.get(TAU_COLUMN[t]) for t in TASKS]
    tau = facts.values.get(TAU_COLUMN[task])
    if not _defined(tau):
        return "order dependence not measured (tau-PSI not reported)" if facts.integer_grades else ""
    if all(not _defined(t) or t == 0 for t in taus):
        return "order-invariant: every shuffle gives the same ranking"
    tau_b = facts.values.get(f"{TAU_COLUMN[task]}_b")
    if tau > 0 and tau_b == 0:
        return (f"order-invariant scores: tau-PSI {tau:.2f} comes only from tied scores broken by presented "
                "position (tau-PSI-b 0.00)")
    if tau < NEARLY_INVARIANT:
        words = f"nearly order-invariant: rankings barely move over shuffles (tau-PSI {tau:.2f})"
    elif abs(tau - CHANCE_TAU_PSI) <= AT_CHANCE:
        words = f"order-dependent: rankings at chance (tau-PSI {tau:.2f})"
    elif tau > CHANCE_TAU_PSI:
        words = f"order-dependent: rankings further apart than chance (tau-PSI {tau:.2f})"
    else:
        words = f"order-dependent: rankings move over shuffles (tau-PSI {tau:.2f})"
    slot = facts.slots.get(TAU_COLUMN[task])
    if slot is not None:
        named = f" (slot {slot[0]} {'favoured' if slot[1] > 0 else 'penalised'})" if slot[0] else ""
        words += (f", though the slot moves the scores{named}" if tau < NEARLY_INVARIANT
                  else f", scores follow the slot{named}")
    return words


def _quality_words(facts: RowFacts, task: str) -> str:
    column = QUALITY_COLUMN[task]
    first = facts.values.get(column)
    mean, worst, best = facts.shuffled.get(task, (None, None, None))
    title = "nDCG@1" if task == "response" else "nDCG@10"
    if not (_defined(mean) and _defined(worst) and _defined(best)):
        return f"{title} {first:.2f} on the first-stage order" if _defined(first) else ""
    if _defined(first) and worst == best == first:
        return f"{title} {first:.2f} in every order"
    spread = f"{title} {worst:.2f} to {best:.2f} over shuffles (mean {mean:.2f})"
    return f"{spread} against {first:.2f} on the first-stage order" if _defined(first) else spread


def _decision_words(facts: RowFacts, task: str) -> str:
    column = DECISION_COLUMN[task]
    value = facts.values.get(column)
    if not _defined(value):
        return ""
    if column in facts.degenerate:  # the next sentence says why and what to change
        return ""
    return {"rerank": f"kept sets overlap {value:.2f} between shuffles (Jacc.)",
            "qa": f"the reader's answer flips {value:.2f} (ans. flip)",
            "response": f"the preferred pair flips {value:.2f} (pair flip)"}[task]


def verdict(facts: RowFacts) -> str:
    """The note's first line ('' for a row without any cell)."""
    task = headline_task(facts.values)
    if task is None:
        return ""
    parts = [p for p in (_order_words(facts, task), _quality_words(facts, task), _decision_words(facts, task)) if p]
    return "; ".join(parts)


def degenerate_words(facts: RowFacts) -> list[str]:
    """Per degenerate decision cell: why, in plain words (each rule with its datasets), then what to
    change, each remedy once."""
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
    if facts.ties:
        out.append(("ties", f"ties ({_tasks_of(facts.ties)})"))
    if facts.degenerate:
        out.append(("degenerate", f"degenerate ({', '.join(COLUMN_TITLES[c] for c in facts.degenerate)})"))
    if facts.tie_broken:
        out.append(("tie-broken", f"tie-broken ({_tasks_of(facts.tie_broken)})"))
    return out


def note(facts: RowFacts, lead: str = "") -> tuple[str, list[str]]:
    """(the row's note, the flag keys it uses): verdict, then the config's own note or the skip
    reason (``lead``), the degenerate cells' sentences, then ``flags: ...``."""
    marks = flag_marks(facts)
    parts = [p for p in (verdict(facts), lead, *degenerate_words(facts)) if p]
    if facts.integer_grades and lead.find("tau-PSI not reported") < 0:
        parts.append("tau-PSI not reported (integer grades: most of the order is tie-breaking)")
    text = ". ".join(parts)
    if marks:
        text = f"{text}. Flags: {'; '.join(m for _, m in marks)}" if text else f"Flags: {'; '.join(m for _, m in marks)}"
    return text, [k for k, _ in marks]


def legend(used: Sequence[str], docs: str) -> str:
    """One line per flag used in the table, each linking its methods page (``docs``: the path
    from table1.md to docs/methods/)."""
    keys = [k for k in FLAGS if k in set(used)]
    if not keys:
        return ""
    lines = [f"- **{FLAGS[k].mark}**: {FLAGS[k].meaning} ([{FLAGS[k].title}]({docs}{FLAGS[k].page}))." for k in keys]
    return "\nFlags:\n" + "\n".join(lines) + "\n"


__all__ = ["DEGENERATE_FIXES", "FLAGS", "NEARLY_INVARIANT", "RowFacts", "degenerate_words", "flag_marks",
           "headline_task", "legend", "note", "slot_mark", "verdict"]
