"""A scorer named where it lives, with no install: ``path/to/file.py:factory`` (relative to the
working directory) and ``package.module:factory``; its capabilities checked when the config is,
its ``options:`` reaching it, and its identity naming the spec, the file's sha256 and the options."""

from __future__ import annotations

import sys

import pytest

from presdep.config import SCHEMA_PATH, ConfigError, validate_config
from presdep.config.records import PromptSettings, ScoringRun
from presdep.scoring import make_scorer, scorer_entry
from presdep.scoring.read_through import TextReads

SPEC = "scorers/firstslot.py:make_firstslot"

# Query-word overlap with a bonus for the document shown first; the bonus comes as a keyword
# argument (a named parameter), the tie-break scale through run.setting.
FIRSTSLOT = '''
from presdep.scoring import GradeReadout


class FirstSlot:
    name = "firstslot"

    def __init__(self, bonus, scale):
        self.bonus, self.scale = bonus, scale

    def score(self, query, docs):
        words = set(query.lower().split())
        return [GradeReadout(self.scale * sum(w in words for w in d.lower().split()) + (self.bonus if i == 0 else 0.0))
                for i, d in enumerate(docs)]

    def score_prompts(self, prompts):
        return [self.score(q, d) for q, d in prompts]


def make_firstslot(run, prompt, first_slot_bonus=0.0):
    return FirstSlot(first_slot_bonus, run.setting("scale", 1.0))


make_firstslot.capabilities = CAPS
'''
BATCHED = {"batched_listwise": True, "needs_model": False, "env": "cpu", "local_model": False}


def _write_plugin(root, caps=BATCHED, text=FIRSTSLOT):
    (root / "scorers").mkdir(exist_ok=True)
    (root / "scorers" / "firstslot.py").write_text(text.replace("CAPS", repr(caps)))


def _config(**variant) -> dict:
    return {
        "protocol": {},
        "datasets": {"d": {"task": "rerank", "candidates": {"format": "rank_llm_json", "path": "x"},
                           "qrels": {"format": "trec", "path": "q"}}},
        "variants": {"v": variant},
    }


def _problems(**variant) -> str:
    with pytest.raises(ConfigError) as err:
        validate_config(_config(**variant), SCHEMA_PATH)
    return str(err.value)


def _run(**variant) -> ScoringRun:
    filled = validate_config(_config(**variant), SCHEMA_PATH)
    return ScoringRun.checked(filled["variants"]["v"], name="v")


@pytest.fixture
def in_repo(tmp_path, monkeypatch):
    """A working directory (as Snakemake's) holding scorers/firstslot.py."""
    monkeypatch.chdir(tmp_path)
    _write_plugin(tmp_path)
    return tmp_path


def test_a_file_plugin_loads_with_its_capabilities_checked_at_config_load(in_repo):
    run = _run(scorer=SPEC, bsc_k=2, options={"first_slot_bonus": 0.5})
    entry = scorer_entry(SPEC)
    assert entry.capabilities.batched_listwise and not entry.capabilities.needs_model and entry.source == "file"
    scorer = make_scorer(run, PromptSettings())
    assert [r.score for r in scorer.score("red fox", ["red", "a red fox", "blue"])] == [1.5, 2.0, 0.0]
    # the same file without batched_listwise: BSC is refused when the config is checked
    _write_plugin(in_repo, caps={"needs_model": False})
    assert ("variants.v: BSC (bsc_k 2), but scorer 'scorers/firstslot.py:make_firstslot' lacks capability "
            "'batched_listwise'") in _problems(scorer=SPEC, bsc_k=2)


def test_options_reach_the_factory_and_run_setting(in_repo):
    run = _run(scorer=SPEC, options={"first_slot_bonus": 2.0, "scale": 10.0, "note": [1, {"a": 2}]})
    assert run.setting("first_slot_bonus") == 2.0 and run.setting("note") == [1, {"a": 2}]
    assert run.setting("window") == 20  # the variant's own keys still answer
    assert [r.score for r in make_scorer(run, PromptSettings()).score("fox", ["fox", "fox"])] == [12.0, 10.0]
    # a factory taking **kwargs gets every option; one naming none of them gets none
    _write_plugin(in_repo, text=FIRSTSLOT.replace("first_slot_bonus=0.0)", "**kw)").replace(
        "FirstSlot(first_slot_bonus,", "FirstSlot(kw['first_slot_bonus'] + len(kw),"))
    assert [r.score for r in make_scorer(run, PromptSettings()).score("fox", ["fox"])] == [10.0 + 2.0 + 3]
    _write_plugin(in_repo, text=FIRSTSLOT.replace(", first_slot_bonus=0.0)", ")").replace(
        "FirstSlot(first_slot_bonus,", "FirstSlot(0.0,"))
    assert [r.score for r in make_scorer(run, PromptSettings()).score("fox", ["fox"])] == [10.0]


def test_the_identity_changes_with_an_option_and_with_the_files_bytes(in_repo):
    def identities(bonus):
        run = _run(scorer=SPEC, options={"first_slot_bonus": bonus})
        scorer = make_scorer(run, PromptSettings())
        return run.as_dict(), scorer.describe(), TextReads(scorer).cache_identity()

    record, describe, cache = identities(0.5)
    assert record["scorer"] == SPEC and len(record["scorer_sha256"]) == 64
    assert describe["scorer_identity"] == {"scorer": SPEC, "scorer_sha256": record["scorer_sha256"],
                                           "options": {"first_slot_bonus": 0.5}}
    other = identities(0.25)
    assert all(a != b for a, b in zip((record, describe, cache), other))
    _write_plugin(in_repo, text=FIRSTSLOT + "\n# an edit\n")
    edited = identities(0.5)
    assert edited[0]["scorer_sha256"] != record["scorer_sha256"]
    assert all(a != b for a, b in zip((record, describe, cache), edited))


def test_bad_specs_fail_the_config_check_in_one_line(in_repo):
    missing_file = _problems(scorer="scorers/nope.py:make_firstslot")
    assert "variants.v.scorer: scorer 'scorers/nope.py:make_firstslot': cannot read scorers/nope.py" in missing_file
    assert "expected a Python file 'path/to/file.py:factory'" in missing_file
    missing_attr = _problems(scorer="scorers/firstslot.py:make_other")
    assert "variants.v.scorer: scorer 'scorers/firstslot.py:make_other': scorers/firstslot.py has no attribute " \
           "'make_other'" in missing_attr
    (in_repo / "scorers" / "broken.py").write_text("def make(run, prompt)\n    return None\n")
    broken = _problems(scorer="scorers/broken.py:make")
    assert "variants.v.scorer: scorer 'scorers/broken.py:make': syntax error in scorers/broken.py line 1" in broken
    missing_module = _problems(scorer="no_such_scorer_pkg.words:make")
    assert ("variants.v.scorer: scorer 'no_such_scorer_pkg.words:make': cannot import module "
            "'no_such_scorer_pkg.words'") in missing_module
    assert "expected an importable module 'package.module:factory'" in missing_module
    for text in (missing_file, missing_attr, broken, missing_module):
        assert len(text.splitlines()) == 2  # the header and the one problem


def test_an_importable_module_names_a_scorer(tmp_path, monkeypatch):
    name = "presdep_spec_test_words"
    (tmp_path / f"{name}.py").write_text(FIRSTSLOT.replace("CAPS", repr({"needs_model": False})))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        spec = f"{name}:make_firstslot"
        run = _run(scorer=spec, options={"first_slot_bonus": 1.0})
        assert scorer_entry(spec).source == "module" and "scorer_sha256" not in run.as_dict()
        scorer = make_scorer(run, PromptSettings())
        assert [r.score for r in scorer.score("fox", ["fox", "fox"])] == [2.0, 1.0]
        assert scorer.describe()["scorer_identity"] == {"scorer": spec, "options": {"first_slot_bonus": 1.0}}
        assert "lacks capability 'batched_listwise'" in _problems(scorer=spec, bsc_k=2)
    finally:
        sys.modules.pop(name, None)
