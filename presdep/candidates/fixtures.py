"""Build a dataset's fixture (candidates + qrels Parquet) from the files its config names."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from presdep.config.query_lists import QueryList
from presdep.config.records import Dataset, thaw
from presdep.contracts.errors import InputFormatError, InvalidInput
from presdep.contracts.presentations import random_shuffle, stable_seed
from presdep.contracts.schemas import write_table
from presdep.data.beir import read_beir_qrels
from presdep.data.duplicates import duplicates_in
from presdep.data.rank_llm import read_rank_llm_json
from presdep.data.responses import read_responses
from presdep.data.trec import read_qrels

log = logging.getLogger(__name__)


def load_candidates(source: Mapping[str, Any], first_stage: str | Path | None = None) -> pl.DataFrame:
    """Candidates with text, in the candidates contract, for one ``candidates:`` config entry."""
    fmt = source.get("format")
    if fmt == "rank_llm_json":
        return read_rank_llm_json(source["path"])
    if fmt in ("trec_run", "bm25"):
        from presdep.candidates.bm25 import first_stage_candidates, read_first_stage
        from presdep.data.trec import read_run

        run = read_run(source["run"]) if fmt == "trec_run" else read_first_stage(first_stage)
        return first_stage_candidates(run, source)
    raise InvalidInput(f"unknown candidates format {fmt!r}; expected rank_llm_json, trec_run or bm25")


# Candidates formats that carry their own judgements (and, for QA, gold answers).
SELF_JUDGED = ("ircot_jsonl", "hotpotqa_json", "rm_bench_json", "responses_jsonl")
_GOLD_SCHEMA = {"query_id": pl.String, "answer": pl.String}


def load_self_judged(source: Mapping[str, Any]) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame | None]:
    """(candidates, qrels, gold answers or None), in file order, for a SELF_JUDGED format."""
    fmt = source["format"]
    if fmt in ("ircot_jsonl", "hotpotqa_json"):
        from presdep.data.hotpotqa import read_hotpotqa

        return tuple(read_hotpotqa(source["path"], fmt))
    return tuple(read_responses(source["path"], fmt))


def load_qrels(source: Mapping[str, Any]) -> pl.DataFrame:
    fmt = source.get("format")
    if fmt == "trec":
        return read_qrels(source["path"])
    if fmt == "beir":
        return read_beir_qrels(source["path"], source["split"])
    if fmt == "irds":
        from presdep.data.irds import load_qrels

        return load_qrels(source["id"])
    raise InvalidInput(f"unknown qrels format {fmt!r}; expected trec, beir or irds")


def check_candidates(cands: pl.DataFrame, where: str) -> pl.DataFrame:
    """Order by first-stage rank and refuse what cannot be scored.

    Empty texts (empty or whitespace only, after reading):

    - an empty query is an error naming the file and the query id: there is nothing to
      judge relevance against, and scoring it would still yield numbers;
    - an empty document is a warning with the count and the first (query, doc) in file
      order, and is scored as given: a document may legitimately be empty (a title-less
      BEIR entry, an empty passage in a run), and dropping it would change the list.
    """
    blank_query = cands.filter(pl.col("query").fill_null("").str.strip_chars() == "")
    if blank_query.height:
        row = blank_query.row(0, named=True)
        n = blank_query["query_id"].n_unique()
        more = f" ({n} queries have an empty text)" if n > 1 else ""
        raise InputFormatError(where, f"query {row['query_id']}",
                               f"expected a non-empty query text, got {row['query'] or ''!r}{more}")
    empty = cands.filter(pl.col("doc").fill_null("").str.strip_chars() == "")
    if empty.height:
        row = empty.row(0, named=True)
        log.warning("%s: %d candidate(s) have an empty document text and are scored as empty (first: query %s doc %s)",
                    where, empty.height, row["query_id"], row["doc_id"])
    ranks = cands.group_by("query_id").agg(pl.col("first_stage_rank").n_unique().alias("u"), pl.len().alias("n"))
    bad = ranks.filter(pl.col("u") != pl.col("n"))
    if bad.height:
        raise InputFormatError(where, f"query {bad['query_id'][0]}", "first-stage ranks repeat within the query")
    return cands.sort(["query_id", "first_stage_rank"])


def cut_to_depth(cands: pl.DataFrame, k_input: int | None, where: str) -> tuple[pl.DataFrame, dict]:
    """Each query's ``k_input`` best first-stage ranks (all when None), and what the cut did
    (for the metadata: k_input, candidates per query before and after, queries short of k)."""
    before = cands.group_by("query_id").len()["len"]
    if k_input is not None:
        cands = (cands.sort("query_id", "first_stage_rank")
                 .filter(pl.int_range(pl.len()).over("query_id") < k_input))
    after = cands.group_by("query_id").len()["len"]
    short = int((after < k_input).sum()) if k_input is not None else 0
    if short:
        log.warning("%s: %d of %d queries have fewer than k_input = %d candidates (as few as %d); they are scored "
                    "with what they have", where, short, after.len(), k_input, int(after.min()))
    depth = {"k_input": k_input, "before": {"min": int(before.min()), "max": int(before.max())},
             "after": {"min": int(after.min()), "max": int(after.max())}, "queries_short": short}
    return cands, depth


QUERY_SUBSET_RULE = "seeded_sample"


def query_subset(query_ids: Sequence[str], n: int | None, *, seed: int, dataset: str,
                 listed: Collection[str] = ()) -> list[str]:
    """The queries a dataset is evaluated on: the ONE subset rule of every format (not the
    paper's: it evaluates every judged query; Table 1's note says when a run sampled).

    All distinct ids are sorted (so file order never matters), shuffled with a seed from
    (``seed``, dataset), and the first ``n`` kept; returned sorted. Growing ``n`` keeps
    every query an smaller ``n`` chose, so a larger run only adds queries. Queries on the
    dataset's shuffle list (``listed``) come first, so a small sample still has shuffles.
    """
    ids = sorted(set(map(str, query_ids)))
    if n is None or n >= len(ids):
        return ids
    if n < 1:
        raise InvalidInput(f"dataset {dataset!r}: max_queries must be >= 1, got {n}")
    order = random_shuffle(ids, stable_seed(int(seed), "query_subset", dataset))
    listed = set(listed)
    return sorted(([q for q in order if q in listed] + [q for q in order if q not in listed])[:n])


def build_fixture(
    record: Dataset,
    out_candidates: str | Path,
    out_qrels: str | Path,
    params: Mapping[str, Any] | None = None,
    first_stage: str | Path | None = None,
    out_gold: str | Path | None = None,
) -> None:
    """Read the dataset's files, check them against each other, write the contracts
    (candidates, qrels and, with ``out_gold``, answers_gold: empty unless the format has answers).

    ``max_queries`` keeps :func:`query_subset`'s seeded sample (seed: the dataset's protocol
    seed); the rule, its seed and the counts go into every output's metadata.
    """
    dataset, ds_config, seed = record.name, thaw(record.spec), record.protocol.seed
    source = ds_config["candidates"]
    where = str(source.get("path") or source.get("run") or first_stage or dataset)
    gold = own_qrels = None
    if source["format"] in SELF_JUDGED:
        cands, own_qrels, gold = load_self_judged(source)
        cands = check_candidates(cands, where)
    else:
        cands = check_candidates(load_candidates(source, first_stage), where)
    cands, depth = cut_to_depth(cands, ds_config.get("k_input"), where)
    have_candidates = set(cands["query_id"].unique().to_list())
    population = None
    plist = QueryList.from_spec(ds_config.get("population_queries"), where=f"datasets.{dataset}.population_queries")
    if plist is not None:
        ids = plist.ids()
        have = set(cands["query_id"].unique().to_list())
        absent = sorted(set(ids) - have)
        if len(absent) == len(ids):
            raise InputFormatError(where, "whole file", f"the query ids of population list {plist.name!r} "
                                   f"({plist.file}); none of its {len(ids)} ids is here (e.g. {ids[0]!r})")
        if absent:
            log.warning("%s: %d of the %d ids on population list %r have no candidates (e.g. %s)",
                        dataset, len(absent), len(ids), plist.name, absent[0])
        cands = cands.filter(pl.col("query_id").is_in(list(ids)))
        population = {**plist.as_dict(), "ids": len(ids), "of": len(have), "absent": absent}
        log.info("%s: population list %s keeps %d of %d queries", dataset, plist.name, len(ids) - len(absent), len(have))
    all_queries = cands["query_id"].unique().to_list()
    qlist = record.protocol.shuffle_queries
    listed = qlist.ids() if qlist is not None else ()
    # An alias (another dataset under other settings) evaluates exactly its dataset's sample.
    keep = query_subset(all_queries, ds_config.get("max_queries"), seed=seed,
                        dataset=ds_config.get("alias_of") or dataset, listed=listed)
    cands = cands.filter(pl.col("query_id").is_in(keep))
    subset = {"rule": QUERY_SUBSET_RULE, "seed": int(seed), "max_queries": ds_config.get("max_queries"),
              "queries": len(keep), "of": len(all_queries)}
    shuffle_list = None
    if qlist is not None:
        absent = sorted(set(listed) - set(all_queries))
        if absent:
            log.warning("%s: %d of the %d ids on shuffle list %r have no candidates (e.g. %s)",
                        dataset, len(absent), len(listed), qlist.name, absent[0])
        shuffle_list = {**qlist.as_dict(), "ids": len(listed), "in_fixture": len(set(listed) & set(keep)),
                        "absent": absent}
    if len(keep) < len(all_queries):
        log.info("%s: evaluating a seeded sample of %d of %d queries (seed %d)", dataset, len(keep), len(all_queries), seed)
    if ds_config.get("qrels"):
        qrels = load_qrels(ds_config["qrels"])
        qrels_path = ds_config["qrels"].get("path") or ds_config["qrels"].get("id")
    elif own_qrels is not None:
        qrels, qrels_path = own_qrels, where
    else:
        raise InvalidInput(f"dataset {dataset!r}: candidates format {source.get('format')!r} needs a qrels entry")
    known = set(cands["query_id"].unique().to_list())
    unknown = qrels.filter(~pl.col("query_id").is_in(list(known)))
    # Queries left out by max_queries (or a population list) are the config's choice, not a
    # mismatch of the user's files: said as such, apart from judgements no candidate answers.
    unsampled = unknown.filter(pl.col("query_id").is_in(list(have_candidates)))
    stray = unknown.filter(~pl.col("query_id").is_in(list(have_candidates)))
    if unsampled.height:
        log.info("%s: %d judgement(s) of the %d quer(ies) outside this run's sample (max_queries or the "
                 "population list) are set aside", qrels_path, unsampled.height, unsampled["query_id"].n_unique())
    if stray.height:
        # trec_eval's convention: judgements for queries without a run are ignored. Logged.
        log.warning(
            "%s: %d judgement(s) for %d query id(s) that have no candidates in %s are ignored (e.g. %s)",
            qrels_path, stray.height, stray["query_id"].n_unique(), where, stray["query_id"][0],
        )
    qrels = qrels.filter(pl.col("query_id").is_in(list(known)))
    judged = set(qrels["query_id"].unique().to_list())
    unjudged = sorted(known - judged)
    if unjudged:
        log.warning("%s: %d query id(s) have no judgements and get no quality metrics (e.g. %s)", qrels_path, len(unjudged), unjudged[0])
    if qrels.height == 0:
        raise InputFormatError(qrels_path, "whole file", f"no judgement matches a query of dataset {dataset!r}")
    repeated = duplicates_in(cands)
    if source["format"] not in SELF_JUDGED:  # those readers warn about their own file already
        repeated.warn(where)
    meta = {"dataset": dataset, "ignored_qrels": unknown.height, "unsampled_qrels": unsampled.height, "unjudged_queries": len(unjudged),
            "query_subset": subset, "shuffle_queries": shuffle_list, "population_queries": population,
            "depth": depth, "duplicate_texts": repeated.as_dict()}
    write_table(cands, out_candidates, "candidates", params, **meta)
    write_table(qrels.sort(["query_id", "doc_id"]), out_qrels, "qrels", params, **meta)
    if out_gold is not None:
        if gold is None:
            if ds_config["task"] == "qa":
                raise InputFormatError(where, "whole file", f"task qa needs gold answers; format {source.get('format')!r} has none")
            gold = pl.DataFrame(schema=_GOLD_SCHEMA)
        gold = gold.filter(pl.col("query_id").is_in(list(known)))
        write_table(gold.sort("query_id", maintain_order=True), out_gold, "answers_gold", params, **meta)
