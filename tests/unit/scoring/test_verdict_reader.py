"""The verdict reader: label normalisation, the passages each presentation gives it, the evidence slots,
DISPUTED and unlabelled claims left out, and the pinned prompt through the shared frozen reader."""

from __future__ import annotations

import polars as pl
import pytest
import torch

from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import read_metadata, read_table, write_table
from presdep.scoring.frozen_reader import QA_PROMPT, FrozenReader
from presdep.scoring.reader import READER_PROMPT_SHA256
from presdep.scoring.verdict_reader import VERDICT_PROMPT, normalize_verdict, read_verdicts, read_verdicts_files


@pytest.mark.parametrize("reply, label", [
    ("SUPPORTED", "SUPPORTED"), ("supports", "SUPPORTED"), ("Entailment.", "SUPPORTED"),
    ("REFUTED", "REFUTED"), ("Refutes", "REFUTED"), ("contradicts the claim", "INVALID"),  # CONTRADICTS: no alias
    ("NOT ENOUGH INFO", "NEI"), ("not_enough-info.", "NEI"), ("Insufficient", "INVALID"), ("NEI", "NEI"),
    ("Verdict: **SUPPORTED**", "SUPPORTED"),
    ("SUPPORTED or REFUTED", "INVALID"),  # two classes named
    ("The claim is true", "INVALID"), ("", "INVALID"),
    ("SUPPORTEDLY", "INVALID"),  # whole words only
])
def test_normalize_verdict(reply, label):
    assert normalize_verdict(reply) == label


class ScriptedReader:
    """Stands in for the frozen model: each prompt's reply is chosen from the first passage it reads."""

    def __init__(self, replies: dict[str, str]):
        self.replies, self.seen = replies, []

    def generate_for(self, items, progress=False, done_dir=None):
        self.seen += list(items)
        return [self.replies[passages[0]] for _, passages in items]


def _scores(rows):
    return pl.DataFrame(rows, schema={"query_id": pl.String, "doc_id": pl.String, "perturbation": pl.String,
                                      "presentation": pl.Int32, "position": pl.Int32, "score": pl.Float64},
                        orient="row")


def _inputs():
    # Claim c1: docs a (evidence), b, c; two shuffles. Claim c2 is DISPUTED, c3 has no gold label.
    scores = _scores([
        ("c1", "a", "random_shuffle", 0, 0, 2.0), ("c1", "b", "random_shuffle", 0, 1, 3.0), ("c1", "c", "random_shuffle", 0, 2, 1.0),
        ("c1", "a", "random_shuffle", 1, 2, 3.0), ("c1", "b", "random_shuffle", 1, 0, 3.0), ("c1", "c", "random_shuffle", 1, 1, 1.0),
        ("c2", "x", "random_shuffle", 0, 0, 1.0), ("c2", "y", "random_shuffle", 0, 1, 0.0),
        ("c3", "z", "random_shuffle", 0, 0, 1.0), ("c3", "w", "random_shuffle", 0, 1, 0.0),
    ])
    docs = {"a": "alpha", "b": "beta", "c": "gamma", "x": "xi", "y": "ypsilon", "z": "zeta", "w": "omega"}
    owner = {"a": "c1", "b": "c1", "c": "c1", "x": "c2", "y": "c2", "z": "c3", "w": "c3"}
    candidates = pl.DataFrame({"query_id": [owner[d] for d in docs], "query": [f"claim {owner[d]}" for d in docs],
                               "doc_id": list(docs), "doc": list(docs.values())})
    qrels = pl.DataFrame({"query_id": ["c1", "c1"], "doc_id": ["a", "c"], "relevance": [1, 0]})
    labels = pl.DataFrame({"query_id": ["c1", "c2"], "claim": ["", ""], "gold": ["SUPPORTED", "DISPUTED"]})
    return scores, candidates, qrels, labels


def test_read_verdicts_top_k_in_score_order_with_evidence_slots():
    scores, candidates, qrels, labels = _inputs()
    reader = ScriptedReader({"beta": "SUPPORTED", "alpha": "Refutes, I think"})
    with pytest.raises(InvalidInput, match="reader k"):
        read_verdicts(scores, candidates, qrels, labels, reader, k=2)
    table, facts = read_verdicts(scores, candidates, qrels, labels, reader, k=3)
    # Shuffle 0: b (3.0), a (2.0), c; shuffle 1: a and b tie at 3.0, b was shown first (position 0).
    assert [p for _, p in reader.seen] == [["beta", "alpha", "gamma"], ["beta", "alpha", "gamma"]]
    assert reader.seen[0][0] == "claim c1"
    assert table["verdict"].to_list() == ["SUPPORTED", "SUPPORTED"]
    assert table["gold"].to_list() == ["SUPPORTED", "SUPPORTED"]
    # Evidence = relevance > 0: only a, in slot 1 (0-based) both times; c (relevance 0) is not evidence.
    assert table["evidence_in_topk"].to_list() == [1, 1] and table["evidence_slot"].to_list() == [1, 1]
    assert facts["excluded_disputed"] == 1 and facts["unlabelled"] == 1 and facts["claims_read"] == 1
    assert facts["presentations"] == 2


def test_read_verdicts_refuses_labels_of_another_dataset():
    scores, candidates, qrels, _ = _inputs()
    other = pl.DataFrame({"query_id": ["q9"], "claim": [""], "gold": ["REFUTED"]})
    with pytest.raises(InvalidInput, match="no scored claim has a gold verdict"):
        read_verdicts(scores, candidates, qrels, other, ScriptedReader({}), k=3)


def test_prompt_digests():
    # The QA prompt keeps the digest of its template text (older answers files stay comparable).
    assert QA_PROMPT.sha256 == READER_PROMPT_SHA256
    assert VERDICT_PROMPT.sha256 != QA_PROMPT.sha256 and len(VERDICT_PROMPT.sha256) == 64
    messages = VERDICT_PROMPT.messages("Sea level is rising.", ["p one", "p two"], max_doc_chars=3)
    assert messages[0] == {"role": "system", "content": VERDICT_PROMPT.system}
    assert messages[1]["content"].startswith("Evidence:\n[1] p o\n[2] p t\n\nClaim: Sea level is rising.")
    assert "SUPPORTED, REFUTED, NOT ENOUGH INFO" in messages[1]["content"]


def test_read_verdicts_files_with_a_tiny_reader(tmp_path):
    """The job end to end on a tiny random chat model: the verdicts contract, its facts, and the
    shared reader machinery (the system message reaches the chat template)."""
    from scorers_tiny import tiny_causal_lm

    model_dir = tiny_causal_lm(tmp_path / "m")
    scores, candidates, qrels, labels = _inputs()
    write_table(scores.with_columns(pl.lit(0, dtype=pl.Int32).alias("prompt"), pl.col("position").alias("slot"),
                                    *(pl.lit(None, dtype=pl.Float32).alias(c) for c in ("p0", "p1", "p2", "p3"))),
                tmp_path / "scores.parquet", "scores", {}, bsc_k=1, bsc_ensembles=4)
    write_table(candidates.with_columns(pl.lit(0, dtype=pl.Int32).alias("first_stage_rank"),
                                        pl.lit(0.0).alias("first_stage_score")),
                tmp_path / "candidates.parquet", "candidates")
    write_table(qrels, tmp_path / "qrels.parquet", "qrels")
    (tmp_path / "labels.jsonl").write_text('{"query_id": "c1", "label": "SUPPORTS"}\n'
                                           '{"query_id": "c2", "label": "DISPUTED"}\n', encoding="utf-8")
    out = tmp_path / "verdicts.parquet"
    read_verdicts_files(scores_path=tmp_path / "scores.parquet", candidates_path=tmp_path / "candidates.parquet",
                        qrels_path=tmp_path / "qrels.parquet", labels_path=tmp_path / "labels.jsonl",
                        labels_format="verdicts_jsonl", out_path=out, model_dir=model_dir, max_doc_chars=100,
                        reader_config={"k": 3, "max_new_tokens": 4, "batch_size": 2, "device": "cpu",
                                       "dtype": "float32"})
    table = read_table(out, "verdicts")
    assert table.height == 2 and set(table["verdict"]) <= {"SUPPORTED", "REFUTED", "NEI", "INVALID"}
    meta = read_metadata(out)
    assert meta["reader"]["prompt"] == "verdict_reader_v1" and meta["reader"]["prompt_sha256"] == VERDICT_PROMPT.sha256
    assert meta["facts"]["excluded_disputed"] == 1 and meta["k"] == 3
    assert not (tmp_path / "verdicts.parquet.partial").exists()  # finished batches are cleared


def test_frozen_reader_puts_the_system_message_in_the_prompt(tmp_path):
    from scorers_tiny import tiny_causal_lm
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_causal_lm(tmp_path / "m"))
    model = torch.nn.Linear(1, 1)
    model.config = type("C", (), {"_name_or_path": "tiny"})()
    verdict = FrozenReader(model, tok, prompt=VERDICT_PROMPT).prompt_ids("c", ["p"])
    qa = FrozenReader(model, tok).prompt_ids("c", ["p"])
    def squeezed(text):  # the character tokenizer's decode drops whitespace
        return "".join(text.split())

    text, system = squeezed(tok.decode(verdict)), squeezed(VERDICT_PROMPT.system)
    assert text.startswith("<|im_start|>system" + system) and "Claim:c" in text
    assert system not in squeezed(tok.decode(qa)) and "Question:c" in squeezed(tok.decode(qa))
