"""The closed config: unknown keys fail early with their YAML path, defaults live in the schema only."""

import copy
import re

import pytest
from config_errors import config_error
from workflow_utils import REPO, planned_jobs, scratch_workflow, snakemake

from presdep.config import (
    SCHEMA_PATH,
    WorkflowConfig,
    apply_replacing_sections,
    load_yaml,
    schema_defaults,
    validate_config,
)

SCHEMA = SCHEMA_PATH


_error = config_error


# One misspelling per level of the config: (where to put it, the YAML path the error must name, the fix).
MISSPELLINGS = [
    (("protocol",), "MM", "protocol.MM", "M"),
    (("datasets", "synthetic"), "max_queris", "datasets.synthetic.max_queris", "max_queries"),
    (("datasets", "synthetic", "candidates"), "fromat", "datasets.synthetic.candidates.fromat", "format"),
    (("variants", "off_the_shelf"), "calibraton", "variants.off_the_shelf.calibraton", "calibration"),
    (("variants", "oc_sft", "student"), "objectve", "variants.oc_sft.student.objectve", "objective"),
    (("models", "smollm2"), "revison", "models.smollm2.revison", "revision"),
    (("teachers", "self"), "TT", "teachers.self.TT", "T"),
]


@pytest.mark.parametrize("where,key,path,fix", MISSPELLINGS, ids=[m[2] for m in MISSPELLINGS])
def test_a_misspelt_key_names_its_path_and_the_closest_valid_key(default_config, where, key, path, fix):
    config = copy.deepcopy(default_config)
    node = config
    for part in where:
        node = node[part]
    node[key] = node.get(fix, 1)
    assert f"{path}: unknown key; did you mean '{fix}'?" in _error(config)


def test_the_round_robin_typo_is_refused_not_run_as_contiguous(default_config):
    config = copy.deepcopy(default_config)
    config["variants"]["round_robin"] = {"label": "Round-robin", "scorer": "transformers", "model": "smollm2",
                                         "chunkng": "round_robin"}
    assert "variants.round_robin.chunkng: unknown key; did you mean 'chunking'?" in _error(config)


def test_every_problem_is_reported_at_once_and_a_secret_is_pointed_at_api_key_env(default_config):
    config = copy.deepcopy(default_config)
    config["protocol"]["M"] = 0
    config["teachers"]["self"]["api_key"] = "sk-secret-value"
    message = _error(config)
    assert "protocol.M: 0 is less than the minimum of 1" in message
    assert "teachers.self.api_key: a secret never goes in the config" in message
    assert "sk-secret-value" not in message


def test_names_that_point_elsewhere_must_exist(default_config):
    config = copy.deepcopy(default_config)
    config["variants"]["off_the_shelf"]["model"] = "smollm3"
    config["variants"]["oc_sft"]["student"]["train"] = "synthetic_heldout"
    message = _error(config)
    assert "variants.off_the_shelf.model: 'smollm3' is not a key of models" in message
    assert "variants.oc_sft.student.train: dataset 'synthetic_heldout' has role 'heldout', expected 'train'" in message


def test_each_schema_default_reaches_the_records(default_config):
    """Every default the schema declares is what the validated config carries where the user said nothing."""
    minimal = {
        "protocol": {},
        "models": {"m": {"source": "local", "path": "model-dir"}},
        "synthetic": {"s": {}},
        "synthetic_tasks": {"t": {"task": "qa"}},
        "datasets": {"d": {"task": "rerank", "candidates": {"format": "bm25", "corpus": {"format": "beir", "path": "c"},
                                                            "topics": {"format": "beir", "path": "c"}},
                           "qrels": {"format": "beir", "path": "c"}},
                     "tr": {"task": "rerank", "role": "train", "candidates": {"format": "rank_llm_json", "path": "x"},
                            "qrels": {"format": "trec", "path": "q"}},
                     "ho": {"task": "rerank", "role": "heldout", "candidates": {"format": "rank_llm_json", "path": "x"},
                            "qrels": {"format": "trec", "path": "q"}}},
        "teachers": {"t": {"kind": "hosted", "model": "gpt", "base_url": "http://127.0.0.1:1/v1"}},
        "variants": {"v": {"scorer": "transformers", "model": "m",
                           "student": {"objective": "oc_sft", "teacher": "t", "train": "tr", "heldout": "ho"}},
                     "h": {"scorer": "hosted", "hosted": {"model": "gpt", "base_url": "http://127.0.0.1:1/v1"}}},
    }
    filled = validate_config(minimal, SCHEMA)
    defaults = schema_defaults(SCHEMA)
    assert len(defaults) > 40
    checked = 0
    for path, default in defaults.items():
        # Expand each `*` over the entries present, walking the user's (raw) and the filled config together.
        pairs = [(minimal, filled)]
        for part in path.split(".")[:-1]:
            pairs = [((raw or {}).get(k), full[k]) for raw, full in pairs if isinstance(full, dict)
                     for k in (full if part == "*" else [part]) if k in full]
        key = path.rsplit(".", 1)[-1]
        for raw, full in pairs:
            if isinstance(full, dict) and key not in (raw or {}):
                value = full[key]
                if isinstance(default, dict):  # an object's default is filled further by its own keys' defaults
                    value = {k: v for k, v in value.items() if k in default}
                assert value == default, f"{path}: {full[key]!r} != schema default {default!r}"
                checked += 1
    assert checked >= len(defaults) - 3, f"only {checked} of {len(defaults)} defaults exercised"
    records = WorkflowConfig.from_validated(filled)
    assert records.datasets["d"].protocol.B == defaults["protocol.B.rerank"]
    assert records.datasets["d"].protocol.max_doc_chars == defaults["protocol.max_doc_chars.rerank"]
    assert records.variants["v"].student.seeds == tuple(defaults["variants.*.student.seeds"])
    assert records.variants["v"].chunking == defaults["variants.*.chunking"]
    assert records.teachers["t"].T == defaults["teachers.*.T"]


def _default_names() -> set[str]:
    return {path.rsplit(".", 1)[-1] for path in schema_defaults(SCHEMA)}


@pytest.mark.parametrize("folder", ["presdep", "rules", "scripts"])
def test_no_layer_restates_a_config_default(folder):
    """`.get("<a key with a schema default>", <value>)` or a module-level *_DEFAULTS table would be a
    second source of truth; config readers index the validated config instead."""
    names = "|".join(sorted(map(re.escape, _default_names()), key=len, reverse=True))
    literal = r"""(-?[\d.]+|["'][^"']*["']|True|False|None|\{\}|\[\])\s*\)"""
    restated = re.compile(rf"""\.get\(\s*["']({names})["']\s*,\s*{literal}""")
    table = re.compile(r"^[A-Z_]*DEFAULTS\b\s*(:[^=]*)?=", re.M)
    offenders = []
    for path in sorted((REPO / folder).rglob("*")):
        if path.suffix not in (".py", ".smk") or "bench" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        for no, line in enumerate(text.splitlines(), 1):
            if restated.search(line) or table.match(line):
                offenders.append(f"{path.relative_to(REPO)}:{no}: {line.strip()}")
    assert not offenders, "defaults restated outside the schema:\n" + "\n".join(offenders)


def test_a_user_file_replaces_datasets_and_variants_and_drops_the_defaults_figure(tmp_path, default_config):
    user = tmp_path / "user.yaml"
    user.write_text("datasets:\n  dl19: {task: rerank, B: 20, candidates: {format: rank_llm_json, path: x.json},"
                    " qrels: {format: trec, path: q.txt}}\nvariants:\n  mine: {scorer: identity}\n")
    merged = apply_replacing_sections(default_config, [user])
    assert list(merged["datasets"]) == ["dl19"] and list(merged["variants"]) == ["mine"]
    assert "figure1" not in merged, "the default's Figure 1 names variants the user file removed"
    filled = validate_config(merged, SCHEMA)
    protocol = WorkflowConfig.from_validated(filled).datasets["dl19"].protocol
    assert protocol.B == 20
    assert protocol.M == default_config["protocol"]["M"]


def test_misspelt_keys_stop_the_workflow_before_any_job(tmp_path):
    """The real workflow: every level's typo in one config file, one error listing all, nothing run."""
    work = scratch_workflow(tmp_path)
    config = load_yaml(REPO / "workflow_config.yaml")
    for where, key, _, fix in MISSPELLINGS:
        node = config
        for part in where:
            node = node[part]
        node[key] = node.get(fix, 1)
    import yaml

    (work / "typos.yaml").write_text(yaml.safe_dump(config))
    res = snakemake(work, "results/table1.csv", "-n", "--cores", "1", "--configfile", "typos.yaml", check=False)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    for _, _, path, fix in MISSPELLINGS:
        assert f"{path}: unknown key; did you mean '{fix}'?" in out
    assert not (work / "results").exists() and not (work / "logs").exists()


def test_parsing_the_workflow_changes_no_environment():
    """Jobs import presdep because it is installed (venv, or the conda envs' post-deploy step)."""
    mutation = re.compile(r"os\.environ(\[[^]]+\]\s*=|\.update|\.setdefault|\.pop)|os\.putenv|sys\.path\.(insert|append)")
    offenders = [f"{p.relative_to(REPO)}:{no}" for p in [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]
                 for no, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if mutation.search(line)]
    assert not offenders, offenders
    for env in ("cpu", "gpu", "retrieval"):
        assert (REPO / "envs" / f"{env}.post-deploy.sh").read_text().strip().endswith("envs/install-presdep.sh")


def test_capcal_names_the_run_whose_probabilities_it_recalibrates(default_config):
    """No probe dataset picked from the first key of a dict: CapCal says which run it reuses."""
    config = copy.deepcopy(default_config)
    del config["variants"]["capcal"]["reuse_scores_of"]
    assert "variants.capcal: 'reuse_scores_of' is a required property" in _error(config)


def test_figure1_is_named_never_guessed(tmp_path):
    """Without `figure1` the figure is not built and asking for it says what to set; a name
    that is not a run or an eval dataset of the config is refused at parse time."""
    work = scratch_workflow(tmp_path)
    config = load_yaml(REPO / "workflow_config.yaml")
    import yaml

    del config["figure1"]
    (work / "nofig.yaml").write_text(yaml.safe_dump(config))
    res = snakemake(work, "results/figure1.svg", "-n", "--cores", "1", "--configfile", "nofig.yaml", check=False)
    assert res.returncode != 0
    assert "results/figure1.svg needs `figure1: {variant: <scoring run>, dataset: <eval dataset>}`" in res.stdout + res.stderr
    dry = snakemake(work, "-n", "--cores", "1", "--configfile", "nofig.yaml")
    assert "figure1" not in planned_jobs(dry.stdout + dry.stderr)

    config["figure1"] = {"variant": "oc_sft", "dataset": "synthetic"}  # a trained variant's run carries its seed
    (work / "badfig.yaml").write_text(yaml.safe_dump(config))
    res = snakemake(work, "-n", "--cores", "1", "--configfile", "badfig.yaml", check=False)
    assert res.returncode != 0 and "figure1.variant: 'oc_sft' is not a scoring run of this config" in res.stdout + res.stderr
    config["figure1"] = {"variant": "oc_sft/seed42", "dataset": "synthetic"}
    (work / "trained.yaml").write_text(yaml.safe_dump(config))
    dry = snakemake(work, "-n", "--cores", "1", "--configfile", "trained.yaml")
    assert planned_jobs(dry.stdout + dry.stderr)["figure1"] == 1


def _with_variants(default_config, variants, **top):
    cfg = copy.deepcopy(default_config)
    cfg.pop("figure1", None)
    cfg["variants"] = variants
    return {**cfg, **top}


def test_the_first_stage_row_is_in_every_table_unless_the_config_says_otherwise(default_config):
    from presdep.config import load_workflow_config

    mine = {"mine": {"label": "Mine", "scorer": "transformers", "model": "smollm2"}}
    _, rec = load_workflow_config(_with_variants(default_config, mine), SCHEMA)
    assert list(rec.variants) == ["first_stage", "mine"]  # first, as the row to beat
    assert rec.variants["first_stage"].scorer == "identity"
    assert rec.variants["first_stage"].label == "First stage (identity)"
    _, rec = load_workflow_config(_with_variants(default_config, mine, first_stage_row=False), SCHEMA)
    assert list(rec.variants) == ["mine"]
    own = {"bm25": {"label": "BM25", "scorer": "identity"}, **mine}
    _, rec = load_workflow_config(_with_variants(default_config, own), SCHEMA)
    assert list(rec.variants) == ["bm25", "mine"]  # the config's own identity row is the row
    clash = {"first_stage": {"scorer": "transformers", "model": "smollm2"}}
    with pytest.raises(ValueError, match="variants.first_stage: the name first_stage_row gives"):
        load_workflow_config(_with_variants(default_config, clash), SCHEMA)
