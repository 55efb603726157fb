"""The queries of a dataset as ``presdep plan`` prices them, and the prompts each stage lays out.

A dataset's queries come from its candidates file when the fixture is on disk
(``results/<dataset>/candidates.parquet``): prompt counts are then exact. Otherwise they come
from the sizes the catalogue records for its entry (``sizes:`` in
``presdep/config/catalogue.yaml``): one typical query stands for all of them, so counts are
estimates. Prompts are counted as the code lays them out (:func:`score_load`,
:func:`silver_load`, :func:`pass_load`, :func:`reader_load`).

Tokens are always estimated: characters / :data:`CHARS_PER_TOKEN` (the grading template's own
text, the query and the documents, each document cut at ``max_doc_chars`` as ``prepare_doc``
cuts it), plus fixed counts for the chat template and the answer skeleton. From the catalogue a
document's length is min(mean length, max_doc_chars): an upper bound of the mean after the cut.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Iterable, Mapping

from presdep.config.catalogue import lookup
from presdep.config.records import Dataset, Protocol, Variant
from presdep.contracts.presentations import INJECTION_PLACES, chunk_positions
from presdep.scoring.reader import READER_PROMPT
from presdep.scoring.run import shuffle_count
from presdep.scoring.template import DEFAULT_TEMPLATE, load_template

# Assumed: English text in Qwen3's (and most BPE) tokenizers averages about 4 characters a token.
CHARS_PER_TOKEN = 4.0
# Qwen3's chat template with thinking off: <|im_start|>system/user/assistant with their newlines,
# two <|im_end|>, and the empty <think></think> block (about 17 tokens).
CHAT_TOKENS = 17
# One skeleton line: "[i] Grade: " (6 tokens, benchmarks/gpu.py's prefix), the dummy grade, a newline.
SLOT_TOKENS = 8
# A reader prompt's chat wrapper (a user turn and the assistant's opening): assumed 10 tokens.
READER_CHAT_TOKENS = 10
# What a pointwise or pairwise scorer adds to the texts it reads (its own prompt and markers): assumed.
PAIR_OVERHEAD_TOKENS = 30


@dataclass(frozen=True)
class QueryShape:
    """One query (or, from the catalogue, ``weight`` queries alike)."""

    n: int                # candidates
    doc_chars: float      # all its documents' characters, each cut as prepare_doc cuts it
    query_chars: float
    shuffled: bool        # on the dataset's shuffle list (its random shuffles are scored)
    relevant: bool        # a candidate is judged relevant (middle_injection reads it)
    weight: int = 1


@dataclass(frozen=True)
class DatasetSize:
    name: str
    shapes: tuple[QueryShape, ...]
    exact: bool           # prompt counts from the candidates file
    source: str

    @property
    def queries(self) -> int:
        return sum(s.weight for s in self.shapes)

    @property
    def known(self) -> bool:
        return bool(self.shapes)


@dataclass(frozen=True)
class Load:
    """Prompts and their tokens; ``pieces`` keeps (prompts, tokens) per mean prompt length, so
    FLOPs can be summed at each length (the attention term is quadratic in it)."""

    prompts: int = 0
    tokens: float = 0.0
    pieces: tuple[tuple[int, float], ...] = field(default=(), repr=False)

    @classmethod
    def of(cls, pieces: Iterable[tuple[int, float]]) -> Load:
        kept = tuple((int(p), float(t)) for p, t in pieces if p)
        return cls(sum(p for p, _ in kept), sum(t for _, t in kept), kept)

    @classmethod
    def total(cls, loads: Iterable[Load]) -> Load:
        return cls.of(piece for load in loads for piece in load.pieces)

    def times(self, k: int) -> Load:
        return Load.of((p * k, t * k) for p, t in self.pieces)

    @property
    def mean_tokens(self) -> float:
        return self.tokens / self.prompts if self.prompts else 0.0


# ---------------------------------------------------------------- sizes


def candidates_file(results: str | Path, dataset: str) -> Path:
    """Where build_fixture writes a dataset's candidates (rules/fixture.smk)."""
    return Path(results) / dataset / "candidates.parquet"


def dataset_size(ds: Dataset, catalogue: Mapping[str, Mapping], results: str | Path | None) -> DatasetSize:
    """``ds``'s queries: from its candidates file under ``results`` when there (None: never
    looked for, so the answer does not depend on this machine), else from the catalogue."""
    path = candidates_file(results, ds.name) if results is not None else None
    if path is not None and path.is_file():
        return _from_file(ds, path)
    return _from_catalogue(ds, catalogue)


def _from_file(ds: Dataset, path: Path) -> DatasetSize:
    import polars as pl

    p = ds.protocol
    cut = pl.col("doc").cast(pl.String).str.replace_all(r"\s+", " ").str.strip_chars().str.len_chars()
    per_q = (pl.read_parquet(path, columns=["query_id", "query", "doc_id", "doc"])
             .with_columns(cut.clip(upper_bound=p.max_doc_chars).alias("chars"))
             .group_by("query_id", maintain_order=True)
             .agg(pl.len().alias("n"), pl.col("chars").sum().alias("chars"), pl.col("query").first(),
                  pl.col("doc_id")))
    listed = set(p.shuffle_queries.ids()) if p.shuffle_queries is not None else None
    relevant = _relevant(path.with_name("qrels.parquet")) if "middle_injection" in p.perturbations else {}
    shapes = tuple(QueryShape(n=int(n), doc_chars=float(c), query_chars=len(" ".join(str(q).split())),
                              shuffled=listed is None or str(qid) in listed,
                              relevant=bool(relevant.get(str(qid), set()) & {str(d) for d in dids}))
                   for qid, n, c, q, dids in per_q.select("query_id", "n", "chars", "query", "doc_id").iter_rows())
    return DatasetSize(ds.name, shapes, True, f"{path} (prompts exact)")


def _relevant(qrels: Path) -> dict[str, set[str]]:
    if not qrels.is_file():
        return {}
    import polars as pl

    rows = pl.read_parquet(qrels, columns=["query_id", "doc_id", "relevance"]).filter(pl.col("relevance") >= 1)
    out: dict[str, set[str]] = {}
    for q, d in rows.select("query_id", "doc_id").iter_rows():
        out.setdefault(str(q), set()).add(str(d))
    return out


def _from_catalogue(ds: Dataset, catalogue: Mapping[str, Mapping]) -> DatasetSize:
    cid = ds.spec.get("from_catalogue")
    if not isinstance(cid, str):
        return DatasetSize(ds.name, (), False, "no candidates file yet and not a catalogue entry: size unknown")
    entry, pool = lookup(catalogue, cid)
    sizes = entry["sizes"]
    # A QA entry's selection (which a config's catalogue_overrides may shrink) says how many questions.
    queries = _pool_queries(entry, ds) if pool else (entry.get("selection") or {}).get("questions", sizes["queries"])
    if queries is None or sizes["doc_chars"] is None:
        return DatasetSize(ds.name, (), False, f"catalogue {cid}: {sizes['source']}")
    if ds.max_queries:
        queries = min(queries, int(ds.max_queries))
    depth = min(int(sizes["depth"]), int(ds.spec.get("k_input") or sizes["depth"]))
    doc = min(float(sizes["doc_chars"]), float(ds.protocol.max_doc_chars))
    p = ds.protocol
    listed = min(queries, len(p.shuffle_queries.ids())) if p.shuffle_queries is not None else queries
    # Every query is assumed to have a relevant candidate (middle_injection reads it).
    typical = dict(n=depth, doc_chars=depth * doc, query_chars=float(sizes["query_chars"] or 0), relevant=True)
    shapes = tuple(QueryShape(shuffled=s, weight=w, **typical) for s, w in ((True, listed), (False, queries - listed))
                   if w > 0)
    return DatasetSize(ds.name, shapes, False, f"catalogue {cid} sizes (estimated): {sizes['source']}")


def _pool_queries(entry: Mapping, ds: Dataset) -> int:
    """A training pool split's queries: the sampled n less the held-out (and dev) cohorts."""
    s = entry["sampling"]
    split = ds.spec.get("pool_split") or ("heldout" if ds.role == "heldout" else "train")
    return {"heldout": int(s["heldout"]), "dev": int(s.get("dev", 0))}.get(
        split, int(s["n"]) - int(s["heldout"]) - int(s.get("dev", 0)))


# ---------------------------------------------------------------- prompt layouts


@cache
def _chunk_sizes(n: int, b: int, chunking: str) -> tuple[int, ...]:
    return tuple(len(pos) for pos in chunk_positions(n, b, chunking))


@cache
def _fixed_chars(rubric: str, instruction: str | None, b: int) -> int:
    """The grading prompt's own characters for ``b`` items: system message, the user message
    with an empty query and empty items ("[i] " tags kept), without the documents."""
    t = load_template(rubric)
    return len(t.system or "") + len(t.render("", [""] * b, None, instruction)) + b


def _pass_tokens(s: QueryShape, p: Protocol, chunking: str) -> tuple[int, float]:
    """(prompts, tokens) of one presentation of a query: every document once, cut into prompts."""
    sizes = _chunk_sizes(s.n, p.B, chunking)
    rubric = p.rubric or DEFAULT_TEMPLATE
    chars = sum(_fixed_chars(rubric, p.instruction, b) for b in sizes) + len(sizes) * s.query_chars + s.doc_chars
    return len(sizes), chars / CHARS_PER_TOKEN + len(sizes) * CHAT_TOKENS + s.n * SLOT_TOKENS


def presentations(s: QueryShape, v: Variant, p: Protocol, shuffles: int | None = None) -> int:
    """Presentations score_dataset reads for a query: the first-stage pass, then per perturbation
    the random shuffles (M, or E*K for BSC; listed queries only), M within-chunk shuffles, the three
    middle injections (queries with a relevant candidate)."""
    count = 1
    for pert in p.perturbations:
        if pert == "random_shuffle" and s.shuffled:
            count += shuffle_count(v, p) if shuffles is None else shuffles
        elif pert == "within_chunk":
            count += p.M
        elif pert == "middle_injection" and s.relevant:
            count += len(INJECTION_PLACES)
    return count


def score_load(size: DatasetSize, v: Variant, p: Protocol, *, noise: bool,
               shuffles: int | None = None) -> tuple[Load, Load, int]:
    """(presentations' load, noise re-reads' load, score rows) of one score job. ``noise``: the
    scorer re-reads the first-stage pass R times in other batches (listed queries only);
    ``shuffles`` overrides the variant's shuffle count (a read-cache group's union)."""
    base, reread, rows = [], [], 0
    for s in size.shapes:
        prompts, tokens = _pass_tokens(s, p, v.chunking)
        k = presentations(s, v, p, shuffles)
        base.append((prompts * k * s.weight, tokens * k * s.weight))
        r = p.noise_rereads if noise and s.shuffled else 0
        reread.append((prompts * r * s.weight, tokens * r * s.weight))
        rows += (k + r) * s.n * s.weight
    return Load.of(base), Load.of(reread), rows


def probe_load(size: DatasetSize, v: Variant, p: Protocol) -> Load:
    """CapCal's content-free probes: per query one prompt per distinct prompt size, every body empty."""
    rubric = p.rubric or DEFAULT_TEMPLATE
    return Load.of((s.weight, s.weight * ((_fixed_chars(rubric, p.instruction, b) + s.query_chars) / CHARS_PER_TOKEN
                                          + CHAT_TOKENS + b * SLOT_TOKENS))
                   for s in size.shapes for b in sorted(set(_chunk_sizes(s.n, p.B, v.chunking))))


def silver_load(size: DatasetSize, T: int, p: Protocol) -> Load:
    """The teacher's reads (presdep.training.silver.silver_prompts): T shuffles, contiguous chunks."""
    return pass_load(size, p).times(int(T))


def pass_load(size: DatasetSize, p: Protocol, chunking: str = "contiguous") -> Load:
    """One presentation of every query (held-out evaluation reads first-stage chunks)."""
    pieces = []
    for s in size.shapes:
        prompts, tokens = _pass_tokens(s, p, chunking)
        pieces.append((prompts * s.weight, tokens * s.weight))
    return Load.of(pieces)


def pair_load(size: DatasetSize, *, ordered_pairs: bool) -> Load:
    """A pointwise scorer reads each distinct (query, document) once per job; PairRM each ordered
    pair of documents sharing a prompt, at most n(n-1) per query (the bound is used)."""
    pieces = []
    for s in size.shapes:
        doc = s.doc_chars / max(s.n, 1)
        k = s.n * (s.n - 1) if ordered_pairs else s.n
        tokens = (s.query_chars + doc * (2 if ordered_pairs else 1)) / CHARS_PER_TOKEN + PAIR_OVERHEAD_TOKENS
        pieces.append((k * s.weight, k * tokens * s.weight))
    return Load.of(pieces)


def reader_contexts(s: QueryShape, v: Variant, p: Protocol) -> int:
    """The presentations the reader answers from (presdep.scoring.reader.top_k_contexts): random
    shuffles as decisions compare them (M, or BSC's E ensembles), within_chunk and middle_injection
    as stored; never the first-stage pass nor the noise re-reads."""
    count = 0
    for pert in p.perturbations:
        if pert == "random_shuffle" and s.shuffled:
            count += p.M if v.bsc_k == 1 else v.bsc_ensembles
        elif pert == "within_chunk":
            count += p.M
        elif pert == "middle_injection" and s.relevant:
            count += len(INJECTION_PLACES)
    return count


def reader_load(size: DatasetSize, v: Variant, p: Protocol, k: int) -> Load:
    """The reader's prompts of one read_answers job: at most one per context (identical top-k
    prompts are generated once, so this is an upper bound), each with the top ``k`` paragraphs."""
    fixed = len(READER_PROMPT.format(paragraphs="", question=""))
    pieces = []
    for s in size.shapes:
        para = s.doc_chars / max(s.n, 1) + len("[i] \n")
        tokens = (fixed + s.query_chars + min(k, s.n) * para) / CHARS_PER_TOKEN + READER_CHAT_TOKENS
        n = reader_contexts(s, v, p) * s.weight
        pieces.append((n, n * tokens))
    return Load.of(pieces)


def decode_steps(prompts: int, batch_size: int, max_new_tokens: int) -> int:
    """Generation steps of greedy decoding in batches (no early stop: an upper bound)."""
    return math.ceil(prompts / max(int(batch_size), 1)) * int(max_new_tokens)


__all__ = ["CHARS_PER_TOKEN", "CHAT_TOKENS", "SLOT_TOKENS", "DatasetSize", "Load", "QueryShape", "candidates_file",
           "dataset_size", "decode_steps", "pair_load", "pass_load", "presentations", "probe_load", "reader_load",
           "score_load", "silver_load"]
