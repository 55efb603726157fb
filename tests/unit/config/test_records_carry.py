"""The typed records are the one carrier of the protocol: rules read CFG, the library takes records.

The rules read the validated config through the records in ``CFG`` only (never
``config[...]``); the library's functions take a record wherever one exists for what they
are given (a variant, a protocol, a teacher, a student's settings, a dataset), so nothing
downstream re-validates a dict the schema already closed.
"""

from __future__ import annotations

import ast
import re

import pytest
from workflow_utils import REPO

from presdep.config import SCHEMA_PATH, WorkflowConfig, load_workflow_config, load_yaml
from presdep.config.records import Protocol, ScoringRun, TrainingSettings, Variant

# Parameter names that stand for something a record exists for.
RECORD_PARAMS = {"variant", "protocol", "prompt", "run", "teacher", "teacher_spec", "student", "dataset_config",
                 "ds_config", "record", "variants", "datasets"}
DICT_ANNOTATION = re.compile(r"^(Mapping|dict|MutableMapping)\b")


def test_rules_never_read_the_raw_config():
    sources = [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]
    hits = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in sources
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r"\bconfig\s*(\[|\.get\(|\.items\(|\.keys\()", line)]
    assert not hits, "rules read `config` instead of the records in CFG:\n" + "\n".join(hits)


def _record_params_typed_as_dicts(root) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            for a in args:
                if a.arg in RECORD_PARAMS and a.annotation is not None:
                    ann = ast.unparse(a.annotation)
                    if DICT_ANNOTATION.match(ann) and not ann.startswith(("Mapping[str, Variant]", "Mapping[str, Dataset]")):
                        out.append(f"{path.relative_to(root)}:{node.lineno} {node.name}({a.arg}: {ann})")
    return out


def test_library_functions_take_records_not_config_dicts():
    found = _record_params_typed_as_dicts(REPO / "presdep")
    assert not found, "functions taking a config dict where a record exists:\n" + "\n".join(found)


def test_the_scan_reports_a_function_typed_the_old_way(tmp_path):
    """The scan is not vacuous: dict-typed variant and protocol parameters are reported, records are not."""
    (tmp_path / "old.py").write_text("from typing import Any, Mapping\n"
                                     "def score(variant: Mapping[str, Any], protocol: dict, run: ScoringRun) -> None: ...\n")
    assert _record_params_typed_as_dicts(tmp_path) == ["old.py:2 score(variant: Mapping[str, Any])",
                                                       "old.py:2 score(protocol: dict)"]


def test_workflow_records_round_trip_through_job_params():
    """A job gets as_dict() as params and rebuilds the same record from it."""
    raw = load_yaml(REPO / "workflow_config.yaml")
    _, cfg = load_workflow_config(raw, SCHEMA_PATH)
    assert isinstance(cfg, WorkflowConfig)
    for name, v in cfg.variants.items():
        again = Variant.from_spec(name, v.as_dict())
        assert again == v and again.capabilities == v.capabilities
    for d in cfg.datasets.values():
        assert Protocol.from_dict(d.protocol.as_dict()) == d.protocol
    for v in cfg.trained_variants.values():
        settings = {**v.student.as_dict(), "lambda": v.student.lambdas[0]}
        rebuilt = TrainingSettings.from_dict(settings)
        assert rebuilt.lam == v.student.lambdas[0] and rebuilt.steps == v.student.spec["steps"]


def test_library_callers_get_the_schema_checks_once_at_construction():
    with pytest.raises(ValueError, match="lacks"):
        ScoringRun.checked({"scorer": "identity"})
    with pytest.raises(ValueError, match="chunking"):
        Variant.checked({"scorer": "identity", "chunking": "sideways", "calibration": "none", "bsc_k": 1,
                         "bsc_ensembles": 2})
    with pytest.raises(ValueError, match="perturbations"):
        Protocol.checked({"seed": 1, "M": 2, "B": 3, "max_doc_chars": 10, "perturbations": ["nope"]})
    run = ScoringRun.checked({"scorer": "identity", "chunking": "contiguous", "calibration": "none", "bsc_k": 1,
                              "bsc_ensembles": 2, "model": "/models/x"})
    assert run.model == {"source": "local", "path": "/models/x"} and run.variant.capabilities.reads == "ids"
