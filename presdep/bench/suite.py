"""The seeded task suite: 60 reasoning items in six families, five paraphrased prompts each.

Every item is drawn from ``random.Random`` seeded with a string built from the split
seed and the family name (string seeds are hashed with SHA-512, so a split is the
same on every platform and Python 3 version). A task records::

    {"id": "arith-03-v2", "item": "arith-03", "family": "arithmetic", "variant": "v2",
     "prompt": "...", "answer": "57", "answer_type": "number" | "list",
     "options": null | ["Ann", ...]}

Generation rules that keep trivial answer policies near zero (see the weak-policy
test): answers are distinct within a family, never 0, 1 or 2, never a number that
appears in the prompt, and an ordering answer never follows the order in which the
prompt first names the people.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any, Callable, Iterable

from presdep.bench.grader import score_answer
from presdep.contracts.errors import PresdepError
from presdep.contracts.schemas import write_text_atomic
from presdep.runtime.text_files import read_text_file

PUBLIC_SEED = 20250617  # the documented public seed; the committed split is generate_split(PUBLIC_SEED)
HIDDEN_PREFIX = "hid-"
ITEMS_PER_FAMILY = 10
VARIANTS = ("v1", "v2", "v3", "v4", "v5")
FAMILIES = ("arithmetic", "ordering", "remainder", "rule_tracing", "sequence", "set_counting")
_SHORT = {"arithmetic": "arith", "ordering": "order", "remainder": "rem",
          "rule_tracing": "rule", "sequence": "seq", "set_counting": "sets"}
_BLOCKED = {0, 1, 2}
PUBLIC_PATH = Path(__file__).with_name("data") / "public.jsonl"

_NAMES = ["Arlo", "Bexa", "Corin", "Dusa", "Elvo", "Fenna", "Gavi", "Hollis", "Iven", "Jorra",
          "Kessa", "Lumo", "Mirel", "Nodi", "Orla", "Pell", "Quin", "Rasha", "Sivo", "Tamsin"]
_WORDS = ["apple", "banjo", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "jasper",
          "kettle", "lantern", "maple", "nectar", "orchid", "pepper", "quartz", "raven", "saffron", "tulip",
          "umber", "violet", "walnut", "yarrow", "zephyr", "acorn", "basil", "clover", "dune", "fern"]


class SuiteError(PresdepError, ValueError):
    """A split cannot be generated or read; the message names the file and line."""


# One item = (prompts for v1..v5, answer string, answer type, options or None).
Item = tuple[list[str], str, str, list[str] | None]


def _numbers_ok(answer: int, shown: Iterable[int], used: set[int]) -> bool:
    return answer not in _BLOCKED and answer not in set(shown) and answer not in used


def _arithmetic(rng: random.Random, used: set[int]) -> Item:
    while True:
        a, b, c, d = rng.randint(12, 90), rng.randint(3, 9), rng.randint(6, 25), rng.randint(5, 40)
        ans = a + b * c - d
        if _numbers_ok(ans, (a, b, c, d), used):
            break
    prompts = [
        f"Mia has {a} dollars. She earns {b} payments of {c} dollars each and then spends {d} dollars. "
        "How many dollars does she have now? Reply with the number only.",
        f"Start from {a}. Add {b} times {c}, then subtract {d}. What is the result?",
        f"A wallet holds ${a}. Then {b} deposits of ${c} each are made, followed by one withdrawal of ${d}. "
        "What is the final balance in dollars?",
        f"Compute {a} + {b} * {c} - {d} and give the final value.",
        f"A player begins with {a} coins, wins {c} coins in each of {b} rounds, and then loses {d} coins. "
        "How many coins does the player have at the end?",
    ]
    return prompts, str(ans), "number", None


def _ordering(rng: random.Random, used: set[str]) -> Item:
    while True:
        people = rng.sample(_NAMES, 4)  # tallest first
        ans = ", ".join(people)
        listed = people[:]
        while listed == people:
            rng.shuffle(listed)
        pairs = [(people[i], people[i + 1]) for i in range(3)]
        rng.shuffle(pairs)
        if ans not in used:
            break
    names = ", ".join(listed)
    taller = " ".join(f"{x} is taller than {y}." for x, y in pairs)
    shorter = " ".join(f"{y} is shorter than {x}." for x, y in pairs)
    above = " ".join(f"In height, {x} stands above {y}." for x, y in pairs)
    prompts = [
        f"Four people: {names}. {taller} List them from tallest to shortest, separated by commas.",
        f"The people are {names}. {shorter} Order all four from tallest to shortest.",
        f"Consider {names}. {above} Who is tallest, second, third and shortest? Give the names in that order.",
        f"People: {names}.\nFacts: {taller}\nWrite the four names in order of height, tallest first.",
        f"We compare the heights of {names}. {shorter} Reply with the names sorted from tallest to shortest.",
    ]
    return prompts, ans, "list", listed


def _remainder(rng: random.Random, used: set[int]) -> Item:
    while True:
        n, k = rng.randint(120, 999), rng.randint(11, 40)
        ans = n % k
        if _numbers_ok(ans, (n, k), used):
            break
    prompts = [
        f"What is the remainder when {n} is divided by {k}?",
        f"{n} marbles are packed into bags of {k}. How many marbles are left over after filling as many "
        "bags as possible?",
        f"Find {n} modulo {k}.",
        f"If {n} students form teams of exactly {k}, how many students are left without a full team?",
        f"Divide {n} by {k} using whole-number division. What remainder do you get?",
    ]
    return prompts, str(ans), "number", None


def _collatz(x: int, steps: int) -> int:
    for _ in range(steps):
        x = x // 2 if x % 2 == 0 else 3 * x + 1
    return x


def _rule_tracing(rng: random.Random, used: set[int]) -> Item:
    while True:
        s, t = rng.randint(7, 99), rng.randint(3, 6)
        ans = _collatz(s, t)
        if _numbers_ok(ans, (s, t, 1, 2, 3), used):
            break
    prompts = [
        f"Start with x = {s}. Apply this rule {t} times: if x is even, divide it by 2; otherwise multiply "
        "it by 3 and add 1. What is x at the end?",
        f"A counter shows {s}. Each step, an even value is halved and an odd value becomes three times "
        f"itself plus one. What does the counter show after {t} steps?",
        f"Rule: even n -> n / 2, odd n -> 3n + 1. Beginning at {s}, what number do you reach after "
        f"{t} applications of the rule?",
        f"Trace the process for {t} steps from the value {s}: halve the value when it is even, and "
        "triple it and add one when it is odd. Report the final value.",
        f"Let a(0) = {s}, and a(k+1) = a(k)/2 if a(k) is even, else 3*a(k)+1. Compute a({t}).",
    ]
    return prompts, str(ans), "number", None


def _sequence(rng: random.Random, used: set[int]) -> Item:
    while True:
        kind, a = rng.choice(("add", "mul", "grow")), rng.randint(2, 30)
        if kind == "add":
            d = rng.randint(3, 19)
            terms = [a + i * d for i in range(6)]
        elif kind == "mul":
            r = rng.choice((2, 3))
            terms = [a * r**i for i in range(6)]
        else:
            d = rng.randint(1, 6)
            terms = [a]
            for i in range(5):
                terms.append(terms[-1] + d * (i + 1))
        shown, ans = terms[:5], terms[5]
        if _numbers_ok(ans, shown, used):
            break
    seq = ", ".join(map(str, shown))
    prompts = [
        f"What number comes next in the sequence {seq}, ...?",
        f"Continue the pattern with one more term: {seq}",
        f"Here are the first five terms of a sequence: {seq}. What is the sixth term?",
        f"Find the next value. Sequence: {seq}, ?",
        f"A list follows a fixed rule: {seq}. Give the term that follows.",
    ]
    return prompts, str(ans), "number", None


def _set_counting(rng: random.Random, used: set[int]) -> Item:
    free = [v for v in range(3, 17) if v not in used]
    target = rng.choice(free)
    kind = rng.choice(("union", "both", "only_first"))
    while True:
        both = rng.randint(1, 5) if kind != "both" else target
        only_a = rng.randint(1, 6) if kind != "only_first" else target
        only_b = rng.randint(1, 6)
        if kind == "union":
            both = rng.randint(1, target - 2)
            only_a = rng.randint(1, target - both - 1)
            only_b = target - both - only_a
        if both + only_a + only_b <= len(_WORDS):
            break
    words = rng.sample(_WORDS, both + only_a + only_b)
    common, a_only, b_only = words[:both], words[both:both + only_a], words[both + only_a:]
    first, second = common + a_only, common + b_only
    rng.shuffle(first)
    rng.shuffle(second)
    a, b = ", ".join(first), ", ".join(second)
    question = {
        "union": ("How many different words appear in at least one of the two lists?",
                  "how many distinct words are there in total"),
        "both": ("How many words appear in both lists?", "how many words do the two lists share"),
        "only_first": ("How many words of the first list are missing from the second list?",
                       "how many words are in the first list but not in the second"),
    }[kind]
    prompts = [
        f"First list: {a}. Second list: {b}. {question[0]}",
        f"List A contains {a}. List B contains {b}. Counting each word once, {question[1]}?",
        f"Two baskets hold labelled tokens. Basket one: {a}. Basket two: {b}. {question[0]}",
        f"A = {{{a}}}\nB = {{{b}}}\n{question[0]} Reply with a count.",
        f"Compare these word lists.\nFirst: {a}\nSecond: {b}\nQuestion: {question[1]}?",
    ]
    return prompts, str(target), "number", None


_GENERATORS: dict[str, Callable[[random.Random, set], Item]] = {
    "arithmetic": _arithmetic, "ordering": _ordering, "remainder": _remainder,
    "rule_tracing": _rule_tracing, "sequence": _sequence, "set_counting": _set_counting,
}


def generate_split(seed: int, *, prefix: str = "") -> list[dict[str, Any]]:
    """All 300 tasks of one split, in family, item, variant order."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SuiteError(f"split seed must be an integer, got {seed!r}")
    tasks = []
    for family in FAMILIES:
        rng = random.Random(f"presdep-bench:{seed}:{family}")
        used: set = set()
        for k in range(ITEMS_PER_FAMILY):
            while True:
                prompts, answer, answer_type, options = _GENERATORS[family](rng, used)
                # A prompt that already reads as its own right answer is redrawn.
                probe = {"answer": answer, "answer_type": answer_type, "options": options}
                if not any(score_answer(probe, p) for p in prompts):
                    break
            used.add(int(answer) if answer_type == "number" else answer)
            item = f"{prefix}{_SHORT[family]}-{k + 1:02d}"
            for variant, prompt in zip(VARIANTS, prompts):
                tasks.append({"id": f"{item}-{variant}", "item": item, "family": family, "variant": variant,
                              "prompt": prompt, "answer": answer, "answer_type": answer_type,
                              "options": options})
    return tasks


def split_text(tasks: Iterable[dict[str, Any]]) -> str:
    """JSONL text of a split: one task a line, keys sorted, ASCII only (byte-stable)."""
    return "".join(json.dumps(t, sort_keys=True, ensure_ascii=True) + "\n" for t in tasks)


def write_public_split(path: str | os.PathLike = PUBLIC_PATH) -> Path:
    return write_text_atomic(path, split_text(generate_split(PUBLIC_SEED)))


def write_hidden_split(out_dir: str | os.PathLike, seed: int | None) -> Path:
    """The hidden split (ids prefixed ``hid-``), written only with an explicit private seed."""
    if seed is None:
        raise SuiteError("the hidden split needs an explicit private seed (--seed); refusing to write it")
    if seed == PUBLIC_SEED:
        raise SuiteError(f"seed {seed} is the public seed; the hidden split needs a private one")
    return write_text_atomic(Path(out_dir) / "hidden.jsonl", split_text(generate_split(seed, prefix=HIDDEN_PREFIX)))


_TASK_KEYS = {"id": str, "item": str, "family": str, "variant": str, "prompt": str, "answer": str,
              "answer_type": str, "options": (list, type(None))}


def read_split(path: str | os.PathLike = PUBLIC_PATH) -> list[dict[str, Any]]:
    """Read and validate a split file (JSONL, one task a line)."""
    path = Path(path)
    tasks, seen = [], {}
    for n, line in enumerate(read_text_file(path).split("\n"), 1):
        if not line.strip():
            continue
        try:
            t = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SuiteError(f"{path}:{n}: not valid JSON ({exc})") from None
        if not isinstance(t, dict):
            raise SuiteError(f"{path}:{n}: expected a task object, got {type(t).__name__}")
        if set(t) != set(_TASK_KEYS):
            raise SuiteError(f"{path}:{n}: task keys {sorted(t)}; expected exactly {sorted(_TASK_KEYS)}")
        for key, typ in _TASK_KEYS.items():
            if not isinstance(t[key], typ):
                raise SuiteError(f"{path}:{n}: {key!r} has the wrong type ({type(t[key]).__name__})")
        if t["answer_type"] not in ("number", "list"):
            raise SuiteError(f"{path}:{n}: answer_type {t['answer_type']!r}; expected 'number' or 'list'")
        if t["answer_type"] == "list" and not t["options"]:
            raise SuiteError(f"{path}:{n}: a 'list' task needs its options")
        if t["id"] in seen:
            raise SuiteError(f"{path}:{n}: duplicate task id {t['id']!r} (first on line {seen[t['id']]})")
        seen[t["id"]] = n
        tasks.append(t)
    if not tasks:
        raise SuiteError(f"{path}: no tasks")
    return tasks


if __name__ == "__main__":  # regenerate the committed public split
    print(write_public_split())
