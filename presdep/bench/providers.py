"""Model runners: something that turns task prompts into answers.

A provider has ``model_id`` (the model named in the run report), ``describe()``
(public settings: never a key) and ``answer(tasks) -> list[Reply]``. A reply with
``text=None`` is a failed request: the report records it as failed (score null,
never 0) and counts it in ``totals.failed`` with its id.

``mock`` needs no key: a seeded mix of right and wrong answers in assorted formats
(plain, labelled, JSON in a code fence, with currency or units), so it exercises the
grader too. Its skill depends on the seed, per family and per prompt variant, so the
model id carries the seed (``mock-s7``): different seeds are different models. The
``run`` index changes only the draw of which answers come out right: repeated runs
of one model.
"""

from __future__ import annotations

import random
from typing import Any, Mapping, Sequence

from presdep.bench.reply import Provider, Reply
from presdep.contracts.errors import InvalidInput

PROVIDERS = ("mock", "openai", "openrouter", "transformers")


class MockProvider:
    def __init__(self, seed: int = 0, run: int = 0):
        if isinstance(seed, bool) or not isinstance(seed, int) or isinstance(run, bool) or not isinstance(run, int):
            raise InvalidInput(f"mock provider: seed and run must be integers, got seed={seed!r}, run={run!r}")
        self.seed, self.run = seed, run
        self.model_id = f"mock-s{seed}"
        rng = random.Random(f"presdep-bench-mock:{seed}")
        self.base = rng.uniform(0.35, 0.85)
        self.family_shift = {f: rng.uniform(-0.15, 0.15) for f in
                             ("arithmetic", "ordering", "remainder", "rule_tracing", "sequence", "set_counting")}
        self.variant_shift = {f"v{i}": rng.uniform(-0.1, 0.1) for i in range(1, 6)}

    def describe(self) -> dict[str, Any]:
        return {"provider": "mock", "seed": self.seed, "run": self.run, "mock": True}

    def p_correct(self, task: Mapping[str, Any]) -> float:
        p = self.base + self.family_shift.get(task["family"], 0.0) + self.variant_shift.get(task["variant"], 0.0)
        return min(0.97, max(0.03, p))

    def _one(self, task: Mapping[str, Any]) -> str:
        rng = random.Random(f"presdep-bench-mock:{self.seed}:{self.run}:{task['id']}")
        right = rng.random() < self.p_correct(task)
        if task["answer_type"] == "list":
            names = task["answer"].split(", ")
            value = names if right else names[::-1]
            return rng.choice([", ".join(value), "Answer: " + " > ".join(value),
                               '```json\n{"answer": ' + str(value).replace("'", '"') + "}\n```"])
        n = int(task["answer"])
        value = n if right else n + rng.choice((-3, -2, -1, 1, 2, 5, 10))
        return rng.choice([str(value), f"Answer: {value}", f"The answer is ${value}.",
                           '```json\n{"answer": ' + str(value) + "}\n```", f"{value} units"])

    def answer(self, tasks: Sequence[Mapping[str, Any]]) -> list[Reply]:
        return [Reply(self._one(t)) for t in tasks]


def model_id_for(name: str, **options: Any) -> str | None:
    """The model id ``make_provider(name, **options)`` would report, without building it (a local
    model is not loaded for this); None when the options do not say. Lets a repeated run check
    every report it will write before the first one."""
    if name == "mock":
        return MockProvider(seed=int(options.get("seed") or 0)).model_id
    if name in ("openai", "openrouter"):
        return options.get("model")  # HostedProvider.model_id
    if name == "transformers":
        return options.get("model_key")  # TransformersProvider.model_id
    return None


def make_provider(name: str, **options: Any) -> Provider:
    """A provider by name; options are the provider's own (see each class)."""
    if name == "mock":
        return MockProvider(seed=int(options.get("seed") or 0), run=int(options.get("run") or 0))
    if name in ("openai", "openrouter"):
        from presdep.bench.hosted_provider import HostedProvider

        return HostedProvider(name, **options)
    if name == "transformers":
        from presdep.bench.local_provider import TransformersProvider

        return TransformersProvider(**options)
    raise InvalidInput(f"unknown provider {name!r}; expected one of {list(PROVIDERS)}")
