"""The benchmark card: a 1200x630 SVG summarising a split (families, variants, provenance)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence
from xml.sax.saxutils import escape

from presdep.contracts.schemas import write_text_atomic


def card_svg(tasks: Sequence[Mapping[str, Any]], provenance: Mapping[str, Any]) -> str:
    fam = Counter(t["family"] for t in tasks)
    items = {f: len({t["item"] for t in tasks if t["family"] == f}) for f in fam}
    variants = sorted({t["variant"] for t in tasks}, key=lambda v: (len(v), v))
    example = next(iter(tasks))
    prompt = example["prompt"].replace("\n", " ")
    lines = [
        '<svg xmlns="http://www.w3.org/2000/svg" width="1200px" height="630px" viewBox="0 0 1200 630" '
        'font-family="DejaVu Sans, Arial, sans-serif">',
        '<rect width="1200" height="630" fill="#ffffff"/>',
        '<text x="60" y="90" font-size="44" font-weight="bold" fill="#1a1a2e">presdep-bench</text>',
        f'<text x="60" y="135" font-size="22" fill="#444">prompt sensitivity: {len(tasks)} tasks, '
        f'{sum(items.values())} items x {len(variants)} paraphrased prompts ({escape(", ".join(variants))})</text>',
    ]
    top = 190
    width = max(fam.values())
    for i, (f, n) in enumerate(sorted(fam.items())):
        y = top + i * 48
        bar = int(560 * n / width)
        lines.append(f'<text x="60" y="{y + 24}" font-size="22" fill="#222">{escape(f)}</text>')
        lines.append(f'<rect x="290" y="{y}" width="{bar}" height="32" fill="#4c72b0"/>')
        lines.append(f'<text x="{300 + bar}" y="{y + 24}" font-size="20" fill="#222">{items[f]} items, {n} tasks</text>')
    lines += [
        f'<text x="60" y="520" font-size="18" fill="#555">split {escape(str(provenance["split"]))}, seed '
        f'{escape(str(provenance["seed"]))}, sha256 {escape(provenance["sha256"][:16])}..., '
        f'presdep {escape(provenance["presdepVersion"])}</text>',
        f'<text x="60" y="560" font-size="16" fill="#777">e.g. {escape(example["id"])}: '
        f'{escape(prompt[:95] + ("..." if len(prompt) > 95 else ""))}</text>',
        '<text x="60" y="600" font-size="16" fill="#777">grader: deterministic; score 0 or 1 per task; '
        'analysis: presdep stability</text>',
        "</svg>",
    ]
    return "\n".join(lines) + "\n"


def write_card(tasks: Sequence[Mapping[str, Any]], provenance: Mapping[str, Any], path: str | os.PathLike) -> Path:
    return write_text_atomic(path, card_svg(tasks, provenance))
