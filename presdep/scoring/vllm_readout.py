"""The vLLM readouts' host-side steps, free of vLLM itself (so they are tested without it).

Two ways to read P(grade) at a prompt's read positions from vLLM:

- ``pooling``: the model runs as vLLM's token classifier (``runner="pooling"``) whose
  classifier is the LM head's rows of the four grade tokens (``hf_overrides`` with
  ``classifier_from_token`` and ``method: no_post_processing``: score weight =
  ``lm_head.weight[grade ids]``). ``encode(..., pooling_task="token_classify")`` returns one
  ``[num_tokens, 4]`` tensor per prompt, raw logits with ``use_activation=False``; row t is
  the grade logits of the distribution that predicts token t + 1, so slot s is row
  ``read_positions[s]`` (as :func:`presdep.scoring.readout.slot_grade_logits` reads it).
- ``logprobs``: ``prompt_logprobs = k`` at every position; ``prompt_logprobs[t]`` is the
  distribution that predicted token t, so slot s is entry ``read_positions[s] + 1``. A slot
  whose grade tokens are not all among the returned ones gets a second read: the prompt's
  prefix up to and including the read position, one generated token with full-vocabulary
  logprobs. Under causal attention that distribution is the one at the read position.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from presdep.contracts.errors import InvalidInput, PresdepError

READOUTS = ("pooling", "logprobs")
DEFAULT_READOUT = "pooling"
# vLLM schedules its own batches; a chunk is what a killed job repeats and what one call holds.
CHUNK_PROMPTS = 256
# PoolerConfig(task=...) picks the token task; vLLM 0.21 removed per-request pooling multitask.
POOLING_MIN_VLLM = (0, 21)
READOUT_OPTION = "set `readout: logprobs` on the variant's model entry (models.<model>.readout)"


class MissingGradeLogprob(PresdepError, RuntimeError):
    """A grade token is absent from the prompt logprobs vLLM returned for a read position."""


def check_readout(mode: Any) -> str:
    if mode not in READOUTS:
        raise InvalidInput(f"vllm readout must be one of {list(READOUTS)}, got {mode!r}")
    return str(mode)


def vllm_version_tuple(version: str) -> tuple[int, int]:
    """(major, minor) of a vLLM version string ("0.33.0", "0.21.1rc2.dev5+g0abc")."""
    parts = re.findall(r"\d+", version)[:2]
    if len(parts) < 2:
        raise InvalidInput(f"cannot read a vLLM version from {version!r}")
    return int(parts[0]), int(parts[1])


def pooling_refusal(architectures: Sequence[str] | None, softcap: Any = None, vllm_version: str | None = None,
                    adapter: str | Path | None = None, logits_scaling: Any = None) -> str | None:
    """Why the pooling readout cannot read this model exactly, or None."""
    archs = list(architectures or [])
    if len(archs) != 1 or not archs[0].endswith("ForCausalLM"):
        return f"the model's architectures {archs} are not one *ForCausalLM (the grade classifier is built from one)"
    if softcap:  # the model caps its logits (Gemma 2); vLLM's classifier would not
        return f"the model caps its logits (final_logit_softcapping={softcap}); the classifier rows would not"
    if logits_scaling and logits_scaling != 1:  # Granite divides its logits; the classifier rows would not
        return f"the model scales its logits (logits_scaling={logits_scaling}); the classifier rows would not"
    if vllm_version is not None and vllm_version_tuple(vllm_version) < POOLING_MIN_VLLM:
        return f"vLLM {vllm_version} predates {'.'.join(map(str, POOLING_MIN_VLLM))} (PoolerConfig(task=...))"
    if adapter is not None and (head := adapter_head_modules(adapter)):
        return (f"adapter {adapter} changes {head}; vLLM builds the grade classifier from the base model's "
                "LM head when it loads, so LoRA cannot reach it")
    return None


def adapter_head_modules(adapter: str | Path) -> list[str]:
    """The output-side modules a PEFT adapter trains (lm_head; embed_tokens saved whole, which a tied
    head shares): the grade classifier is cut from the base weights, so these never reach it."""
    cfg = json.loads((Path(adapter) / "adapter_config.json").read_text())
    targets = cfg.get("target_modules") or []
    saved = cfg.get("modules_to_save") or []
    found = ["lm_head (LoRA target)"] if "lm_head" in targets else []  # a list, or one regex string
    found += [f"{m} (modules_to_save)" for m in ("lm_head", "embed_tokens") if m in saved]
    if cfg.get("trainable_token_indices"):
        found.append("trainable_token_indices")
    return found


def seq_cls_architecture(causal_lm: str) -> str:
    """``Qwen3ForCausalLM`` -> ``Qwen3ForSequenceClassification`` (vLLM converts it with as_seq_cls_model)."""
    if not causal_lm.endswith("ForCausalLM"):
        raise InvalidInput(f"{causal_lm!r} is not a *ForCausalLM architecture")
    return causal_lm[: -len("ForCausalLM")] + "ForSequenceClassification"


def classifier_tokens(tokenizer: Any, grade_ids: Sequence[int]) -> list[str]:
    """The grade tokens as vocabulary strings, which vLLM maps back with ``convert_tokens_to_ids``."""
    tokens = [str(t) for t in tokenizer.convert_ids_to_tokens(list(grade_ids))]
    back = [int(i) for i in tokenizer.convert_tokens_to_ids(tokens)]
    if back != [int(g) for g in grade_ids]:
        raise InvalidInput(f"grade tokens {tokens} map back to ids {back}, not {list(grade_ids)}; "
                           f"the pooling readout cannot name them ({READOUT_OPTION})")
    return tokens


def pooling_overrides(architectures: Sequence[str], tokens: Sequence[str]) -> dict:
    """``hf_overrides`` turning a causal LM into a token classifier over ``tokens``' LM-head rows."""
    return {"architectures": [seq_cls_architecture(architectures[0])], "classifier_from_token": list(tokens),
            "method": "no_post_processing", "num_labels": len(tokens)}


def _finite(probs: np.ndarray, where: str) -> np.ndarray:
    if not np.isfinite(probs).all():
        raise RuntimeError(f"vllm readout {where}: grade probabilities not finite")
    return probs


def token_logits_probs(data: Any, n_tokens: int, read_positions: Sequence[int], where: str = "") -> np.ndarray:
    """P(grade) per slot, float64 ``[slots, 4]``, from one prompt's token-classifier output
    ``[n_tokens, 4]`` (raw logits): rows ``read_positions``, softmax in float64."""
    import torch

    from presdep.scoring.readout import grade_probs

    t = torch.as_tensor(data)
    if tuple(t.shape) != (n_tokens, 4):
        raise RuntimeError(f"vllm token_classify output {where}: shape {tuple(t.shape)}, expected ({n_tokens}, 4) "
                           "(one row of grade logits per prompt token)")
    rows = t[torch.as_tensor(list(read_positions), dtype=torch.long)]
    return _finite(grade_probs(rows).cpu().numpy(), where)


def grade_probs_from_logprobs(
    entry: Mapping[int, Any] | None, grade_ids: Sequence[int], *, where: str = "", logprobs_k: int | None = None
) -> tuple[float, ...]:
    """P(grade) from one position's returned logprobs, softmaxed over the grade tokens.

    ``entry`` maps token id -> logprob (a float or an object with ``.logprob``, as vLLM
    returns). Every grade token must be present: a missing one would otherwise be a
    silent probability of 0, and which tokens fall outside the top k depends on the slot.
    """
    entry = entry or {}
    missing = [g for g, tid in enumerate(grade_ids) if tid not in entry]
    if missing:
        top = f"the top-{logprobs_k} " if logprobs_k else "the "
        raise MissingGradeLogprob(
            f"vllm readout{' at ' + where if where else ''}: grade(s) {missing} (token ids "
            f"{[grade_ids[g] for g in missing]}) absent from {top}prompt logprobs ({len(entry)} tokens returned)"
        )
    lps = []
    for tid in grade_ids:
        lp = float(getattr(entry[tid], "logprob", entry[tid]))
        if math.isnan(lp) or lp == math.inf:
            raise MissingGradeLogprob(f"vllm readout{' at ' + where if where else ''}: logprob {lp} for token {tid}")
        lps.append(lp)
    top_lp = max(lps)
    if top_lp == -math.inf:
        raise MissingGradeLogprob(f"vllm readout{' at ' + where if where else ''}: every grade token has logprob -inf")
    ex = [math.exp(x - top_lp) for x in lps]
    z = sum(ex)
    return tuple(x / z for x in ex)


@dataclass(frozen=True)
class SecondRead:
    """A slot whose grades were not all in the top k: its prompt's tokens up to its read position."""

    prompt: int
    slot: int
    ids: list[int]


def complete(entry: Mapping[int, Any] | None, grade_ids: Sequence[int]) -> bool:
    return entry is not None and all(t in entry for t in grade_ids)


def logprob_reads(built: Sequence[Any], prompt_logprobs: Sequence[Any], grade_ids: Sequence[int],
                  read_second: Callable[[list[list[int]]], Sequence[Mapping[int, Any]]],
                  logprobs_k: int | None = None) -> tuple[list[np.ndarray], list[SecondRead]]:
    """P(grade) per slot of each built prompt from its ``prompt_logprobs``, and the second reads made.

    Slots with every grade among the returned tokens are read from them; the others are
    collected, and ``read_second`` (a prefix's ids -> its next-token logprobs over the whole
    vocabulary) is called once with all of them."""
    out: list[np.ndarray] = []
    second: list[SecondRead] = []
    for k, (b, plp) in enumerate(zip(built, prompt_logprobs, strict=True)):
        if plp is None or len(plp) != len(b.ids):
            raise RuntimeError(f"vLLM returned {None if plp is None else len(plp)} prompt logprobs for "
                               f"{len(b.ids)} tokens")
        probs = np.full((len(b.read_positions), len(grade_ids)), np.nan)
        for s, r in enumerate(b.read_positions):
            entry = plp[r + 1]
            if complete(entry, grade_ids):
                probs[s] = grade_probs_from_logprobs(entry, grade_ids, where=f"prompt {k}, slot {s + 1}",
                                                     logprobs_k=logprobs_k)
            else:
                second.append(SecondRead(k, s, list(b.ids[: r + 1])))
        out.append(probs)
    if second:
        entries = read_second([x.ids for x in second])
        for x, entry in zip(second, entries, strict=True):
            out[x.prompt][x.slot] = grade_probs_from_logprobs(
                entry, grade_ids, where=f"prompt {x.prompt}, slot {x.slot + 1} (second read, full vocabulary)")
    return [_finite(p, f"prompt {k}") for k, p in enumerate(out)], second


class ReadStats:
    """Counts since the last :meth:`take` (the scoring loop stores them per query) and in total."""

    KEYS = ("second_reads", "second_read_slots")

    def __init__(self) -> None:
        self.total = dict.fromkeys(self.KEYS, 0)
        self._pending = dict.fromkeys(self.KEYS, 0)

    def add(self, second: Sequence[SecondRead]) -> None:
        n = {"second_reads": len({x.prompt for x in second}), "second_read_slots": len(second)}
        for k, v in n.items():
            self.total[k] += v
            self._pending[k] += v

    def take(self) -> dict:
        out, self._pending = self._pending, dict.fromkeys(self.KEYS, 0)
        return out


__all__ = ["CHUNK_PROMPTS", "DEFAULT_READOUT", "READOUTS", "MissingGradeLogprob", "ReadStats", "SecondRead",
           "check_readout", "classifier_tokens", "grade_probs_from_logprobs", "logprob_reads", "pooling_overrides",
           "pooling_refusal", "token_logits_probs"]
