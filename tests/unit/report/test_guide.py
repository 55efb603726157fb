"""The generated documentation is current, covers the whole schema, and every link lands.

The configuration reference (docs/guide/configuration.md) and the Table 1 columns
(docs/methods/table1.md, README.md) are regenerated in memory and compared with the files;
the schema is walked here a second time, independently of the generator, so a property the
generator skipped is caught; and every relative link of README.md and docs/**/*.md must
point to a file (and, for a Markdown page, to a heading) that exists.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from presdep.config import SCHEMA_PATH, load_yaml
from presdep.report import guide
from presdep.report.tables import ALL_COLUMNS

REPO = Path(__file__).resolve().parents[3]
STALE = "is stale: run `python -m presdep.report.guide` and commit the result"


def _page(rel: Path) -> str:
    return (REPO / rel).read_text(encoding="utf-8")


def _block(text: str, name: str) -> str:
    return text.split(f"<!-- {name}:start -->", 1)[1].split(f"<!-- {name}:end -->", 1)[0]


# ---------------------------------------------------------------- generated pages are current


@pytest.mark.parametrize("rel", [guide.CONFIG_PAGE, guide.TABLE1_PAGE, guide.README], ids=str)
def test_generated_page_is_current(rel):
    expected = guide.render(REPO)[rel]
    assert _page(rel) == expected, f"{rel} {STALE}"


def test_check_mode_agrees_with_the_files():
    assert guide.stale(REPO) == [], f"{guide.stale(REPO)} {STALE}"


# ---------------------------------------------------------------- the whole schema is on the page


def _schema_paths(node: dict, prefix: str, defs: dict):
    """Every property path of the schema (map entries as <*>), walked without the generator."""
    if "$ref" in node:
        node = {**_deref(node["$ref"], defs), **{k: v for k, v in node.items() if k != "$ref"}}
    props = dict(node.get("properties", {}))
    for member in node.get("allOf", []):
        if "$ref" in member or "properties" in member:
            merged = _deref(member["$ref"], defs) if "$ref" in member else member
            props.update({k: v for k, v in merged.get("properties", {}).items() if k not in props})
    for name, sub in props.items():
        yield prefix + name
        yield from _schema_paths(sub, f"{prefix}{name}.", defs)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        yield prefix + "<*>"
        yield from _schema_paths(extra, f"{prefix}<*>.", defs)


def _deref(ref: str, defs: dict) -> dict:
    target = defs[ref.removeprefix("#/$defs/")]
    if "allOf" in target:  # a $def built from another $def (hosted -> hosted_settings)
        props = dict(target.get("properties", {}))
        for member in target["allOf"]:
            if "$ref" in member:
                props.update({k: v for k, v in _deref(member["$ref"], defs).get("properties", {}).items()
                              if k not in props})
        target = {**target, "properties": props}
    return target


def test_every_schema_property_path_is_on_the_configuration_page():
    schema = load_yaml(SCHEMA_PATH)
    page = _block(_page(guide.CONFIG_PAGE), "config")
    paths = sorted(set(_schema_paths(schema, "", schema.get("$defs", {}))))
    assert len(paths) > 150, paths  # the walk reached the nested sections
    missing = []
    for path in paths:
        # an entry's placeholder is the generator's choice (<dataset>, <name>); a map entry whose
        # keys are listed shows up as the prefix of those keys' paths
        pattern = "`" + re.escape(path).replace(re.escape("<*>"), "<[a-z_]+>") + r"[`.]"
        if not re.search(pattern, page):
            missing.append(path)
    assert not missing, f"schema properties missing from {guide.CONFIG_PAGE}: {missing}"


def test_a_property_without_description_is_still_listed_with_type_and_default():
    schema = {"type": "object", "properties": {
        "plain": {"type": "integer", "minimum": 1, "default": 3},
        "bare": {},
        "things": {"type": "object", "additionalProperties": {"type": "string"}},
    }}
    rows = {r.path: r for r in guide.schema_rows(schema)}
    assert (rows["plain"].type, rows["plain"].default, rows["plain"].description) == ("integer ≥ 1", "`3`", "")
    assert rows["bare"].type == "any"
    assert rows["things.<name>"].type == "string"
    text = guide.configuration_reference(schema)
    assert "| `plain` | integer ≥ 1 | `3` |  |  |" in text


def test_refs_allof_conditions_and_alternatives_are_rendered():
    schema = {
        "type": "object",
        "properties": {"endpoint": {"$ref": "#/$defs/endpoint", "description": "the caller's own words"}},
        "$defs": {
            "settings": {"type": "object", "properties": {"retries": {"type": "integer", "minimum": 0, "default": 2}}},
            "endpoint": {
                "type": "object", "description": "the def's words",
                "properties": {"kind": {"enum": ["a", "b"]}, "url": {"type": "string"},
                               "share": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                               "weight": {"oneOf": [{"type": "number"}, {"type": "array", "items": {"type": "number"}}]}},
                "allOf": [{"$ref": "#/$defs/settings"},
                          {"if": {"properties": {"kind": {"const": "a"}}}, "then": {"required": ["url"]}}],
            },
        },
    }
    rows = {r.path: r for r in guide.schema_rows(schema)}
    assert rows["endpoint"].description == "the caller's own words"  # the referring node's keys win
    assert rows["endpoint.kind"].type == "`a` \\| `b`"
    assert rows["endpoint.url"].required == "when `kind` is `a`"
    assert rows["endpoint.share"].type == "number in (0, 1]"
    assert rows["endpoint.weight"].type == "number, or array of number"
    assert (rows["endpoint.retries"].type, rows["endpoint.retries"].default) == ("integer ≥ 0", "`2`")


# ---------------------------------------------------------------- the columns table


def test_every_table1_column_is_in_the_one_columns_table_with_an_existing_page():
    table = _block(_page(guide.TABLE1_PAGE), "columns")
    for column in ALL_COLUMNS:
        assert re.search(rf"^\| `{column}` \|", table, flags=re.MULTILINE), f"{column} not in {guide.TABLE1_PAGE}"
    readme = _block(_page(guide.README), "columns")
    for column in ALL_COLUMNS:
        assert f"`{column}`" in readme, f"{column} not in the README's columns table"
    for spec in ALL_COLUMNS.values():
        page = guide.METRIC_PAGES[spec.metric][1].split("#")[0]
        assert (REPO / "docs" / "methods" / page).is_file(), page


# ---------------------------------------------------------------- main() rewrites in place


def _copy_pages(root: Path) -> None:
    for rel in (guide.CONFIG_PAGE, guide.TABLE1_PAGE, guide.README):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, root / rel)


def test_main_rewrites_only_the_generated_blocks(tmp_path, capsys):
    _copy_pages(tmp_path)
    page = tmp_path / guide.CONFIG_PAGE
    prose = page.read_text(encoding="utf-8").split("<!-- config:start -->")[0]
    page.write_text(prose + "<!-- config:start -->\nold reference\n<!-- config:end -->\n", encoding="utf-8")
    assert guide.main(["--root", str(tmp_path), "--check"]) == 1
    assert "stale: docs/guide/configuration.md" in capsys.readouterr().out
    assert "old reference" in page.read_text(encoding="utf-8")  # --check writes nothing
    assert guide.main(["--root", str(tmp_path)]) == 0
    text = page.read_text(encoding="utf-8")
    assert text.startswith(prose) and "old reference" not in text
    assert text == guide.render(REPO)[guide.CONFIG_PAGE]
    assert guide.main(["--root", str(tmp_path), "--check"]) == 0
    assert sorted(p.name for p in page.parent.iterdir()) == ["configuration.md"]  # no temporary file left


def test_a_page_without_its_markers_is_an_error(tmp_path, capsys):
    _copy_pages(tmp_path)
    (tmp_path / guide.TABLE1_PAGE).write_text("# Table 1\n\nno markers here\n", encoding="utf-8")
    assert guide.main(["--root", str(tmp_path)]) == 2
    assert "<!-- columns:start -->" in capsys.readouterr().err
    with pytest.raises(guide.GuideError):
        guide.replace_block("<!-- x:start --> a <!-- x:start --> <!-- x:end -->", "x", "b")


# ---------------------------------------------------------------- every relative link lands


def _without_fences(text: str) -> str:
    return re.sub(r"^( *)```.*?^\1```", "", text, flags=re.DOTALL | re.MULTILINE)


def _without_code(text: str) -> str:
    """Prose only: a link shown as code (```toml blocks, `[x](y)` spans) is not a link."""
    return re.sub(r"`[^`\n]*`", "", _without_fences(text))


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown page (duplicates get -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    text = _without_fences(path.read_text(encoding="utf-8"))
    for heading in re.findall(r"^#{1,6} +(.+?) *$", text, flags=re.MULTILINE):
        slug = _slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_points_to_something_that_exists(page):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _without_code(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {dest.relative_to(REPO)})")
    assert not broken, f"{page.relative_to(REPO)}: {broken}"


def test_no_prose_heading_shadows_a_reference_section():
    """A prose heading named like a section ("Variants") would take the section's anchor."""
    text = _without_fences(_page(guide.CONFIG_PAGE))
    slugs = [_slug(h) for h in re.findall(r"^#{1,6} +(.+?) *$", text, flags=re.MULTILINE)]
    assert len(slugs) == len(set(slugs)), sorted(s for s in slugs if slugs.count(s) > 1)


def test_the_link_check_sees_links():
    links = re.findall(r"\]\(([^)\s]+)\)", _without_code((REPO / "README.md").read_text(encoding="utf-8")))
    assert "docs/guide/configuration.md" in links and "rules/score.smk" in links
    assert "protocol" in _anchors(REPO / guide.CONFIG_PAGE)
