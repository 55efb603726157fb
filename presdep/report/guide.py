"""The generated parts of the documentation: the configuration reference and the Table 1 columns.

Both are rendered from the code that defines them, so a page cannot drift from what the
workflow validates and computes:

- the configuration reference (``docs/guide/configuration.md``) from the closed schema
  ``presdep/config/schema.yaml``: every property's path, type, default and description,
  following ``properties``, ``additionalProperties``, ``$ref`` to ``$defs`` and ``allOf``;
- the Table 1 columns (``docs/methods/table1.md`` and the README's "What you get") from
  :data:`presdep.contracts.columns.TABLE1_COLUMNS` and the CSV's extras (tie-aware tau-PSI,
  nDCG over the shuffles);
- the column guide of ``table1_counts.csv`` (``docs/methods/table1.md``) from
  :data:`presdep.report.counts_columns.COLUMNS`.

Each generated part sits between an HTML comment pair (``<!-- config:start -->`` ...
``<!-- config:end -->``, ``<!-- columns:start -->`` ... ``<!-- columns:end -->``); the prose
around it is hand-written and kept. ``python -m presdep.report.guide`` rewrites the blocks in
place (``--check`` only reports stale pages); tests/unit/report/test_guide.py fails when a
page is stale.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from presdep.config import SCHEMA_PATH, load_yaml
from presdep.contracts.columns import COLUMN_TITLES, TABLE1_COLUMNS
from presdep.contracts.schemas import write_text_atomic
from presdep.report import counts_columns
from presdep.report.tables import EXTRA_COLUMNS, SOURCES, TITLES

# The checkout this module lives in (an editable install); main() takes --root otherwise.
REPO = Path(__file__).resolve().parents[2]
CONFIG_PAGE = Path("docs/guide/configuration.md")
TABLE1_PAGE = Path("docs/methods/table1.md")
README = Path("README.md")
REGENERATE = "python -m presdep.report.guide"

# The methods page of each Table 1 metric, relative to docs/methods/.
METRIC_PAGES = {
    "ndcg@10": ("nDCG", "ndcg.md"),
    "ndcg@1": ("nDCG", "ndcg.md"),
    "tau_psi": ("tau-PSI", "tau-psi.md"),
    "tau_psi_b": ("tau-PSI, tau-b form", "tau-psi.md#the-tie-aware-form-tau_psi_b"),
    "jaccard": ("retained-set Jaccard", "jaccard.md"),
    "answer_flip": ("QA answer flip", "answer-flip.md"),
    "pair_flip": ("response pair flip", "pair-flip.md"),
    **{f"ndcg{k}_shuffle_{part}": ("nDCG over the shuffles", "ndcg.md") for k in (1, 10)
       for part in ("mean", "worst", "best")},
}

# The name shown for an entry of a map section (``datasets.<dataset>.task``); others get <name>.
ENTRY_NAMES = {"models": "<model>", "datasets": "<dataset>", "variants": "<variant>", "teachers": "<teacher>",
               "synthetic": "<name>", "synthetic_tasks": "<name>", "skipped_datasets": "<dataset>"}


class GuideError(ValueError):
    """What the generator cannot render (an unknown $ref, a metric without a page) or a page it
    cannot update (missing, or its markers are absent or doubled)."""


# ---------------------------------------------------------------- the schema, walked


@dataclass(frozen=True)
class SchemaRow:
    path: str            # YAML path, map entries as <name>: "datasets.<dataset>.candidates.format"
    type: str            # markdown: "integer ≥ 1", "`rerank` \| `qa`", "array of string"
    default: str         # markdown ("" when the schema gives none)
    required: str        # "" | "yes" | "when `source` is `hf`"
    description: str     # markdown, one line


def _resolve(node: Mapping[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """A node with its $ref followed (the referring node's own keys win, e.g. its description)
    and the properties of its allOf members merged in (if/then members only add conditions)."""
    out = dict(node)
    ref = out.pop("$ref", None)
    if ref is not None:
        name = ref.removeprefix("#/$defs/")
        if name == ref or name not in defs:
            raise GuideError(f"unsupported $ref {ref!r}: only '#/$defs/<name>' references are rendered")
        target = _resolve(defs[name], defs)
        out = {**target, **out}
    members = out.get("allOf", [])
    props = dict(out.get("properties", {}))
    conditions = []
    for member in members:
        if "if" in member:
            conditions.append(member)
            continue
        merged = _resolve(member, defs)
        for name, sub in merged.get("properties", {}).items():
            props.setdefault(name, sub)  # the node's own properties first, then the shared ones
        conditions += merged["_conditions"]
        for key in ("type", "description"):
            if key in merged:
                out.setdefault(key, merged[key])
    if "if" in out:  # a bare if/then on the object itself (datasets: qrels unless self-labelled)
        conditions.append({k: out[k] for k in ("if", "then", "else") if k in out})
    if props:
        out["properties"] = props
    out["_conditions"] = conditions
    return out


def _code(value: Any) -> str:
    """A value as YAML flow text inside backticks."""
    return f"`{_flow(value)}`"


def _flow(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    return str(value)


def _cell(text: str) -> str:
    """Markdown table-cell text: pipes escaped, and <...> outside code spans made literal
    (GitHub would otherwise read ``<split>`` as an HTML tag and drop it)."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"<(?=[A-Za-z/!])", "&lt;", parts[i])
    return "`".join(parts).replace("|", "\\|").replace("\n", " ").strip()


def type_text(node: Mapping[str, Any], defs: Mapping[str, Any] | None = None) -> str:
    """The type of a schema node in words: enums, alternatives, items and bounds included."""
    defs = defs or {}
    node = _resolve(node, defs) if "$ref" in node or "allOf" in node else node
    if "enum" in node:
        return " | ".join(_code(v) for v in node["enum"])
    if "const" in node:
        return _code(node["const"])
    for key in ("oneOf", "anyOf"):
        if key in node:
            return ", or ".join(type_text(alt, defs) for alt in node[key])
    kind = node.get("type")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind is None:
        return "object" if "properties" in node else "any"
    words = [kind]
    if kind == "array":
        words = [f"array of {type_text(node['items'], defs)}" if "items" in node else "array"]
        lo, hi = node.get("minItems"), node.get("maxItems")
        if lo is not None and lo == hi:
            words.append(f"({lo} items)")
        elif hi is None and lo is not None:
            words.append(f"(at least {lo})")
        elif hi is not None:
            words.append(f"({lo or 0} to {hi} items)")
        if node.get("uniqueItems"):
            words.append("(distinct)")
    elif kind == "object":
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            words = [f"map of names to {_article(type_text(extra, defs))}"]
            if node.get("minProperties"):
                words.append(f"(at least {node['minProperties']})")
    elif kind in ("integer", "number"):
        words.append(_bounds(node))
    elif kind == "string" and "pattern" in node:
        words.append(f"matching `{node['pattern']}`")
    return " ".join(w for w in words if w)


def _bounds(node: Mapping[str, Any]) -> str:
    """A number's range: "≥ 1", "> 0", "in [0, 1]", "in (0, 1)"; "" when unbounded."""
    lo = hi = None
    if "minimum" in node or "exclusiveMinimum" in node:
        lo = ("[", node["minimum"]) if "minimum" in node else ("(", node["exclusiveMinimum"])
    if "maximum" in node or "exclusiveMaximum" in node:
        hi = ("]", node["maximum"]) if "maximum" in node else (")", node["exclusiveMaximum"])
    if lo and hi:
        return f"in {lo[0]}{_flow(lo[1])}, {_flow(hi[1])}{hi[0]}"
    if lo:
        return f"{'≥' if lo[0] == '[' else '>'} {_flow(lo[1])}"
    if hi:
        return f"{'≤' if hi[0] == ']' else '<'} {_flow(hi[1])}"
    return ""


def _article(text: str) -> str:
    return f"an {text}" if text[:1] in "aeiou" else text if text.startswith("`") else f"a {text}"


def _condition_text(cond: Mapping[str, Any]) -> str:
    """An ``if`` schema in words: "`source` is `hf`", "`candidates.format` is one of ...", "there is no `skip`"."""
    parts = []

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for name, sub in node.get("properties", {}).items():
            path = f"{prefix}{name}"
            if "const" in sub:
                parts.append(f"`{path}` is {_code(sub['const'])}")
            elif "enum" in sub:
                parts.append(f"`{path}` is one of {', '.join(_code(v) for v in sub['enum'])}")
            else:
                walk(sub, f"{path}.")

    walk(cond, "")
    if "not" in cond and cond["not"].get("required"):
        parts += [f"there is no `{name}`" for name in cond["not"]["required"]]
    return " and ".join(parts) or "a condition of the schema holds"


def _required_map(node: Mapping[str, Any]) -> dict[str, str]:
    """Property name -> "yes" or "when ..." from ``required`` and the if/then(/else) conditions."""
    out = {name: "yes" for name in node.get("required", [])}
    for cond in node.get("_conditions", []):
        when = _condition_text(cond["if"])
        for name in cond.get("then", {}).get("required", []):
            out.setdefault(name, f"when {when}")
        for name in cond.get("else", {}).get("required", []):
            out.setdefault(name, f"unless {when}")
    return out


def _default_text(node: Mapping[str, Any]) -> str:
    if "default" not in node:
        return ""
    if node["default"] == {} and ("properties" in node or "additionalProperties" in node):
        return "`{}` (its keys' defaults)" if "properties" in node else "`{}`"
    return _code(node["default"])


def schema_rows(schema: Mapping[str, Any] | None = None) -> Iterator[SchemaRow]:
    """Every property of the schema, depth first in schema order, with its full YAML path."""
    schema = load_yaml(SCHEMA_PATH) if schema is None else schema
    defs = schema.get("$defs", {})

    def walk(node: Mapping[str, Any], prefix: str) -> Iterator[SchemaRow]:
        node = _resolve(node, defs)
        required = _required_map(node)
        for name, raw in node.get("properties", {}).items():
            sub = _resolve(raw, defs)
            path = f"{prefix}{name}"
            yield SchemaRow(path, _cell(type_text(sub, defs)), _cell(_default_text(sub)),
                            _cell(required.get(name, "")), _cell(sub.get("description") or ""))
            yield from walk(sub, f"{path}.")
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            entry = f"{prefix}{ENTRY_NAMES.get(prefix.rstrip('.'), '<name>')}"
            sub = _resolve(extra, defs)
            if "properties" in sub:  # an entry's keys are listed row by row; the entry is the map's row
                yield from walk(sub, f"{entry}.")
            else:
                yield SchemaRow(entry, _cell(type_text(sub, defs)), _cell(_default_text(sub)), "",
                                _cell(sub.get("description") or ""))

    yield from walk(schema, "")


def configuration_reference(schema: Mapping[str, Any] | None = None) -> str:
    """The generated reference: the top-level sections, then one table per section's keys."""
    schema = load_yaml(SCHEMA_PATH) if schema is None else schema
    rows = list(schema_rows(schema))
    sections = [r for r in rows if "." not in r.path]
    nested = {s.path: [r for r in rows if r.path.startswith(f"{s.path}.")] for s in sections}
    lines = [f"<!-- generated by `{REGENERATE}` from presdep/config/schema.yaml: edit the schema, not this block -->",
             "", "## Reference", "",
             "Keys are YAML paths; `<dataset>`, `<variant>`, `<model>`, `<teacher>` and `<name>` stand for "
             "the names you choose. An empty default cell means the key has no default (it is optional "
             "unless marked required).", "",
             "| section | type | default | required | description |", "|---|---|---|---|---|"]
    for r in sections:
        name = f"[`{r.path}`](#{_anchor(r.path)})" if nested[r.path] else f"`{r.path}`"
        lines.append(f"| {name} | {r.type} | {r.default} | {r.required} | {r.description} |")
    for section in sections:
        if not nested[section.path]:
            continue
        lines += ["", f"### `{section.path}`", "",
                  "| key | type | default | required | description |", "|---|---|---|---|---|"]
        lines += [f"| `{r.path}` | {r.type} | {r.default} | {r.required} | {r.description} |"
                  for r in nested[section.path]]
    return "\n".join(lines) + "\n"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading whose text is ``heading`` in backticks."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


# ---------------------------------------------------------------- the Table 1 columns


def columns_table(link_prefix: str = "", compact: bool = False) -> str:
    """The one table of Table 1's columns: title, metrics rows read, source, direction, page.

    ``link_prefix`` is the path from the page that shows the table to docs/methods/;
    ``compact`` keeps the column, its title, the better direction and the page (the README)."""
    # the CSV's tie-aware columns, their titles and the counts file's source text live with the table
    extra, titles, sources = EXTRA_COLUMNS, TITLES, SOURCES
    header = (["column", "title in the paper", "better", "page"] if compact else
              ["column", "title in the paper", "reads (task, metric, perturbation)", "computed from", "better", "page"])
    lines = [f"<!-- generated by `{REGENERATE}` from presdep/contracts/columns.py: edit that file, not this table -->",
             "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    groups = [((name,), spec, True) for name, spec in TABLE1_COLUMNS.items()]
    if compact:
        # one row per family of the CSV's extra columns (one page, one direction): the README stays
        # short, nothing is left out
        families: dict[tuple[str, str], list[str]] = {}
        for name, spec in extra.items():
            families.setdefault((METRIC_PAGES.get(spec.metric, ("", spec.metric))[1], spec.direction), []).append(name)
        groups += [(tuple(names), extra[names[0]], False) for names in families.values()]
    else:
        groups += [((name,), spec, False) for name, spec in extra.items()]
    for names, spec, in_md in groups:
        if spec.metric not in METRIC_PAGES:
            raise GuideError(f"Table 1 column {names[0]}: metric {spec.metric!r} has no methods page in "
                             "presdep.report.guide.METRIC_PAGES")
        if in_md:
            title = COLUMN_TITLES[names[0]]
        else:
            where = "beside the table, CSV only"
            title = where if len(names) > 1 else f"{titles[names[0]]} ({where})"
        page, target = METRIC_PAGES[spec.metric]
        cells = [", ".join(f"`{n}`" for n in names), _cell(title)]
        if not compact:
            cells += [f"`{spec.task}`, `{spec.metric}`, `{spec.perturbation}`", _cell(sources[names[0]])]
        cells += [spec.direction, f"[{page}]({link_prefix}{target})"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the pages


def replace_block(text: str, name: str, body: str, where: str = "page") -> str:
    """``text`` with what lies between ``<!-- name:start -->`` and ``<!-- name:end -->`` replaced."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i or text.count(start) != 1 or text.count(end) != 1:
        raise GuideError(f"{where}: needs exactly one {start} followed by one {end}")
    return f"{text[: i + len(start)]}\n{body}{text[j:]}"


def render(root: str | Path = REPO) -> dict[Path, str]:
    """Each generated page under ``root`` (relative path -> its full new text); nothing is written."""
    root = Path(root)
    blocks = {
        CONFIG_PAGE: [("config", configuration_reference())],
        TABLE1_PAGE: [("columns", columns_table()), ("counts", counts_columns.guide_table())],
        README: [("columns", columns_table("docs/methods/", compact=True))],
    }
    out = {}
    for rel, parts in blocks.items():
        path = root / rel
        if not path.is_file():
            raise GuideError(f"{path}: missing; it holds the hand-written prose around the generated part")
        text = path.read_text(encoding="utf-8")
        for name, body in parts:
            text = replace_block(text, name, body, str(rel))
        out[rel] = text
    return out


def stale(root: str | Path = REPO) -> list[Path]:
    """The generated pages under ``root`` whose text differs from what the generator writes."""
    root = Path(root)
    return [rel for rel, text in render(root).items() if (root / rel).read_text(encoding="utf-8") != text]


def regenerate(argv: list[str] | None, *, prog: str, description: str, name: str,
               pages: Callable[[Path], Mapping[Path, str]]) -> int:
    """The command line of a page generator: rewrite each page ``pages(root)`` renders whose text
    differs (atomically: a reader never sees half a page), or with ``--check`` only list them and
    exit 1; a :class:`GuideError` exits 2, prefixed with ``name``."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--root", default=str(REPO), help="the checkout to update (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    args = parser.parse_args(argv)
    root = Path(args.root)
    try:
        rendered = pages(root)
    except GuideError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    changed = [rel for rel, text in rendered.items() if (root / rel).read_text(encoding="utf-8") != text]
    for rel in changed:
        if args.check:
            print(f"stale: {rel} (run `{prog}`)")
        else:
            write_text_atomic(root / rel, rendered[rel])
            print(f"rewrote {rel}")
    return 1 if args.check and changed else 0


def main(argv: list[str] | None = None) -> int:
    return regenerate(argv, prog=REGENERATE, name="presdep.report.guide", pages=render, description=(
        "Rewrite the generated parts of the documentation (configuration reference, Table 1 columns) in place."))


if __name__ == "__main__":
    sys.exit(main())
