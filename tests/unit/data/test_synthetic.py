import hashlib

import polars as pl

from presdep.data.rank_llm import read_rank_llm_json
from presdep.data.synthetic import SyntheticSpec, generate
from presdep.data.trec import read_qrels, read_topics


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_deterministic_and_seed_sensitive(tmp_path):
    spec = SyntheticSpec(seed=5, candidates=8, queries={"train": 3, "heldout": 2, "test": 4})
    generate(spec, tmp_path / "a")
    generate(spec, tmp_path / "b")
    generate(SyntheticSpec(seed=6, candidates=8, queries={"train": 3, "heldout": 2, "test": 4}), tmp_path / "c")
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")


def test_structure_and_qrels_by_construction(tmp_path):
    spec = SyntheticSpec(seed=1, candidates=10, queries={"train": 5, "heldout": 3, "test": 6})
    generate(spec, tmp_path)
    for split, n in spec.queries_per_split().items():
        cands = read_rank_llm_json(tmp_path / split / "candidates.json")
        qrels = read_qrels(tmp_path / split / "qrels.txt")
        topics = read_topics(tmp_path / split / "topics.tsv")
        assert cands["query_id"].n_unique() == n == len(topics)
        assert cands.group_by("query_id").len()["len"].to_list() == [10] * n
        joined = cands.join(qrels, on=["query_id", "doc_id"], how="left")
        assert joined["relevance"].null_count() == 0, "every candidate is judged"
        per_query = joined.group_by("query_id").agg(
            (pl.col("relevance") == 3).sum().alias("answers"), (pl.col("relevance") >= 2).sum().alias("relevant")
        )
        assert (per_query["answers"] == 1).all()
        assert per_query["relevant"].is_between(1, 2).all()
        # The answer document names the entity the query asks about.
        top = joined.filter(pl.col("relevance") == 3)
        for q, d in top.select("query", "doc").iter_rows():
            entity = q.rstrip("?").split(" did ")[-1].split(" was ")[-1]
            assert entity.split()[0] in d


def test_splits_are_disjoint(tmp_path):
    generate(SyntheticSpec(seed=3, candidates=6), tmp_path)
    ids = [set(read_topics(tmp_path / s / "topics.tsv")) for s in ("train", "heldout", "test")]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
