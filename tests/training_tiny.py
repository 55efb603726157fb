"""Shared set-up of the training tests: the schema's student defaults and a toy training set."""

from __future__ import annotations

import polars as pl
import yaml

from presdep.config import SCHEMA_PATH


def _schema_defaults(node: dict, root: dict) -> dict:
    if "$ref" in node:
        for part in node["$ref"].lstrip("#/").split("/"):
            root = root[part]
        node = root
    out = {}
    for key, sub in node.get("properties", {}).items():
        if "default" in sub:
            out[key] = sub["default"]
            if sub["default"] == {} and "properties" in sub:  # nested defaults fill an empty object
                out[key] = _schema_defaults(sub, root)
    return out


def student_defaults() -> dict:
    """The student settings the config schema fills in (the workflow validates with defaults)."""
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    variant = schema["properties"]["variants"]["additionalProperties"]
    return _schema_defaults(variant["properties"]["student"], schema)


def toy_data(n_queries=2, n_docs=4, all_relevant=False):
    rows, silver, qrels = [], [], []
    for q in range(n_queries):
        for d in range(n_docs):
            did = f"q{q}-d{d}"
            rows.append({"query_id": f"q{q}", "query": f"where was entity {q} born", "doc_id": did,
                         "doc": f"entity {d} was born in town {q * 7 + d}", "first_stage_rank": d + 1,
                         "first_stage_score": float(n_docs - d)})
            for t in range(3):
                silver.append({"query_id": f"q{q}", "doc_id": did, "teacher": "toy", "presentation": t,
                               "score": float((d + t + q) % 4), "label_k1": float((d + q) % 4),
                               "label": float((d + q) % 4) / 2})
            qrels.append({"query_id": f"q{q}", "doc_id": did, "relevance": 1 if all_relevant or d == q % n_docs else 0})
    cands = pl.DataFrame(rows).with_columns(pl.col("first_stage_rank").cast(pl.Int32))
    return cands, pl.DataFrame(silver).with_columns(pl.col("presentation").cast(pl.Int32)), pl.DataFrame(qrels)
