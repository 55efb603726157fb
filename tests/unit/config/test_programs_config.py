"""The appendix programs' config blocks: dataset aliases, the width pairs, the pool perturbation's
datasets and contrasts, the verdict reader's datasets, each refused with the key that is wrong."""

from __future__ import annotations

import copy

import pytest

from presdep.config import SCHEMA_PATH, ConfigError, load_workflow_config
from presdep.config.catalogue import check_entry, load_catalogue


def _load(config):
    return load_workflow_config(config, SCHEMA_PATH)[1]


def _with(default_config, **blocks):
    cfg = copy.deepcopy(default_config)
    datasets = blocks.pop("datasets", {})
    cfg["datasets"] = {**cfg["datasets"], **datasets}
    return {**cfg, **blocks}


def test_an_alias_takes_its_dataset_entry_under_its_own_keys(default_config):
    cfg = _load(_with(default_config, datasets={"synthetic_b1": {"alias_of": "synthetic", "B": 1, "M": 1}},
                      width={"pairs": {"synthetic": "synthetic_b1"}}))
    alias, source = cfg.datasets["synthetic_b1"], cfg.datasets["synthetic"]
    assert alias.spec["candidates"] == source.spec["candidates"] and alias.spec["qrels"] == source.spec["qrels"]
    assert (alias.protocol.B, alias.protocol.M) == (1, 1) and (source.protocol.B, source.protocol.M) == (4, 3)
    assert alias.spec["alias_of"] == "synthetic" and "alias_of" not in source.spec


@pytest.mark.parametrize("datasets, width, message", [
    ({"x": {"alias_of": "nope"}}, {}, "datasets.x.alias_of: 'nope' is not a dataset"),
    ({"a": {"alias_of": "synthetic"}, "b": {"alias_of": "a"}}, {}, "datasets.b.alias_of: 'a' is itself an alias"),
    ({"synthetic_b1": {"alias_of": "synthetic", "B": 2}}, {"pairs": {"synthetic": "synthetic_b1"}},
     "width.pairs.synthetic: the alias 'synthetic_b1' must set B: 1"),
    ({}, {"pairs": {"synthetic": "synthetic-qa"}}, "width.pairs.synthetic: 'synthetic-qa' must be a dataset with alias_of"),
])
def test_alias_and_width_errors_name_the_key(default_config, datasets, width, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        _load(_with(default_config, datasets=datasets, width=width))


def test_pool_perturbation_reads_reranking_datasets_and_row_labels(default_config):
    with pytest.raises(ConfigError, match="pool_perturbation.datasets: 'synthetic-qa' is a eval qa dataset"):
        _load(_with(default_config, pool_perturbation={"datasets": ["synthetic-qa"]}))
    with pytest.raises(ConfigError, match=r"pool_perturbation.contrasts: \['Nobody'\] are not row labels"):
        _load(_with(default_config, pool_perturbation={"datasets": ["synthetic"],
                                                       "contrasts": [["Off the shelf", "Nobody"]]}))
    cfg = _load(_with(default_config, pool_perturbation={"datasets": ["synthetic"]}))
    from presdep.config import thaw

    assert thaw(cfg.raw["pool_perturbation"]) == {"datasets": ["synthetic"], "pool": 100, "seed": 0, "query_sample_seed": 0,
                                            "queries": 100, "contrasts": [], "resamples": 20000, "bootstrap_seed": 0}


def test_context_decomposition_reads_reranking_datasets(default_config):
    with pytest.raises(ConfigError, match="context_decomposition.datasets: 'synthetic-qa' is a eval qa dataset"):
        _load(_with(default_config, context_decomposition={"datasets": ["synthetic-qa"]}))
    with pytest.raises(ConfigError, match="context_decomposition.mode"):
        _load(_with(default_config, context_decomposition={"datasets": ["synthetic"], "mode": "half"}))
    with pytest.raises(ConfigError, match="context_decomposition.variants: 'nobody' is not a variant"):
        _load(_with(default_config, context_decomposition={"datasets": ["synthetic"], "variants": ["nobody"]}))
    with pytest.raises(ConfigError, match="context_decomposition.variants: 'capcal' is not an untrained"):
        _load(_with(default_config, context_decomposition={"datasets": ["synthetic"], "variants": ["capcal"]}))
    cfg = _load(_with(default_config, context_decomposition={"datasets": ["synthetic"], "mode": "screen"}))
    from presdep.config import thaw

    assert thaw(cfg.raw["context_decomposition"]) == {"datasets": ["synthetic"], "variants": [], "mode": "screen",
                                                      "pool": 100,
                                                      "shuffles": 10, "queries": 100, "query_sample_seed": 0,
                                                      "resamples": 10000, "bootstrap_seed": 0}


def test_the_verdict_reader_needs_labelled_reranking_datasets(default_config):
    with pytest.raises(ConfigError, match="verdict_reader.datasets: 'synthetic' has no verdict_labels"):
        _load(_with(default_config, verdict_reader={"datasets": ["synthetic"]}))
    with pytest.raises(ConfigError, match="verdict_reader.datasets: 'synthetic-resp' is a eval response dataset"):
        _load(_with(default_config, verdict_reader={"datasets": ["synthetic-resp"]}))


def test_catalogue_k_input_is_no_deeper_than_the_first_stage():
    entry = copy.deepcopy(load_catalogue()["datasets"]["arguana"])
    assert (entry["first_stage"]["k"], entry["k_input"]) == (101, 100)
    assert check_entry(entry, pool=False) == []
    entry["k_input"] = 102
    assert check_entry(entry, pool=False) == ["k_input 102 must be a positive integer no deeper than first_stage.k"]


def test_render_perturbations_read_reranking_rows_that_read_renders(default_config):
    with pytest.raises(ConfigError, match="render_perturbations.datasets: 'synthetic-qa' is a eval qa dataset"):
        _load(_with(default_config, render_perturbations={"datasets": ["synthetic-qa"]}))
    with pytest.raises(ConfigError, match="render_perturbations.kinds"):
        _load(_with(default_config, render_perturbations={"datasets": ["synthetic"], "kinds": ["font"]}))
    with pytest.raises(ConfigError, match="render_perturbations.variants: 'bm25' is not an untrained"):
        _load(_with(default_config, render_perturbations={"datasets": ["synthetic"], "variants": ["bm25"]}))
    with pytest.raises(ConfigError, match=r"render_perturbations.datasets: 'synthetic' uses the rubric 'own.yaml'; "
                                          r"\['scale'\] are shipped for relevance_v2 only"):
        _load(_with(default_config, datasets={"synthetic": {**default_config["datasets"]["synthetic"],
                                                            "rubric": "own.yaml"}},
                    render_perturbations={"datasets": ["synthetic"], "kinds": ["id_relabel", "scale"]}))
    cfg = _load(_with(default_config, render_perturbations={"datasets": ["synthetic"], "kinds": ["separator"]}))
    from presdep.config import thaw

    assert thaw(cfg.raw["render_perturbations"]) == {"datasets": ["synthetic"], "variants": [], "kinds": ["separator"],
                                                     "seed": 0, "queries": 100, "query_sample_seed": 0}
