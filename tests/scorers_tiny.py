"""Tiny offline models for the scorer-family tests: a character tokenizer with a chat
template, and random models of each family's architecture class built from a config."""

from __future__ import annotations

from pathlib import Path

import torch

from presdep.config.records import Protocol, ScoringRun
from presdep.rehearsal.tiny_models import CHAT, SPECIALS, char_tokenizer  # noqa: F401 (the tests import them from here)


def qwen_config(vocab: int, **kw):
    from transformers import Qwen2Config

    return Qwen2Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, **kw)


def save(model, tok, out: Path) -> Path:
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def tiny_causal_lm(out: Path, seed: int = 0) -> Path:
    from transformers import AutoModelForCausalLM

    tok = char_tokenizer()
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(qwen_config(len(tok)), dtype=torch.float32)
    return save(model.eval(), tok, out)


def tiny_llama(smollm2_model_dir: Path, seed: int = 0):
    """(model, tokenizer): a tiny random Llama with the real SmolLM2 tokenizer (grade tokens 32..35)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    tok = AutoTokenizer.from_pretrained(smollm2_model_dir)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight[32:36].mul_(10.0)  # grade rows wide enough that slots differ
    return model, tok


def saved_tiny_llama(smollm2_model_dir: Path, out: Path, seed: int = 0) -> Path:
    """:func:`tiny_llama` saved at ``out`` (a folder a subprocess or make_transformers loads)."""
    return save(*tiny_llama(smollm2_model_dir, seed), out)


def tiny_seq_cls(out: Path, arch: str, seed: int = 0) -> Path:
    """A sequence classifier with one label: "bert" (a cross-encoder) or "qwen3" (a reward model, the
    Skywork-Reward-V2-Qwen3 class)."""
    from transformers import AutoModelForSequenceClassification, BertConfig

    tok = char_tokenizer(pair_template=arch == "bert")
    torch.manual_seed(seed)
    if arch == "bert":
        cfg = BertConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=2048, num_labels=1,
                         pad_token_id=tok.pad_token_id)
    else:
        from transformers import Qwen3Config

        cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=2048,
                          num_labels=1, pad_token_id=tok.pad_token_id)
    model = AutoModelForSequenceClassification.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():  # random heads are near zero: widen them so documents differ
        for p in model.parameters():
            if p.dim() == 2 and p.shape[0] == 1:
                p.mul_(50.0)
    return save(model.eval(), tok, out)


def local_model(path: Path, **extra) -> dict:
    """A model entry as the validated config hands it to a factory."""
    return {"source": "local", "path": str(path), "device": "cpu", "dtype": "float32", "batch_size": 3, **extra}


WORDS = ("alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "maple", "tiger", "ocean", "lemon", "piano")


def tiny_transformers_scorer(folder: Path, B: int = 3):
    """The transformers scorer on a fresh tiny Qwen2 under ``folder`` (B documents a prompt, 200 characters each)."""
    from presdep.scoring.factory import make_scorer

    run = ScoringRun.checked({"scorer": "transformers", "chunking": "contiguous", "calibration": "none", "bsc_k": 1,
                              "bsc_ensembles": 2, "capcal_beta": 1.0, "model": local_model(tiny_causal_lm(folder))})
    proto = Protocol.checked({"seed": 0, "M": 3, "B": B, "perturbations": ["random_shuffle"], "max_doc_chars": 200})
    return make_scorer(run, proto.prompt)


def fixture(n_queries: int = 4, n_docs: int = 6):
    """Candidates and graded qrels of a small reranking / response set (every query has a relevant doc)."""
    import polars as pl

    cand, qrels = [], []
    for q in range(n_queries):
        for d in range(n_docs):
            text = " ".join(WORDS[(q * 5 + d * 7 + k) % len(WORDS)] for k in range(3 + d % 3))
            cand.append((f"q{q}", f"query {WORDS[q]} {WORDS[q + 3]}", f"q{q}d{d}", text, d + 1, float(n_docs - d)))
            qrels.append((f"q{q}", f"q{q}d{d}", (q + 2 * d) % 4))
    c = pl.DataFrame(cand, schema=["query_id", "query", "doc_id", "doc", "first_stage_rank", "first_stage_score"],
                     orient="row").with_columns(pl.col("first_stage_rank").cast(pl.Int32))
    r = pl.DataFrame(qrels, schema=["query_id", "doc_id", "relevance"], orient="row").with_columns(
        pl.col("relevance").cast(pl.Int32))
    return c, r


# A variant / protocol as the validated config hands them over (the schema's defaults filled in).
VARIANT = {"chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 4, "capcal_beta": 1.0,
           "window": 20, "stride": 10, "max_new_tokens": 200}


def protocol(B: int, M: int = 3, perturbations=("random_shuffle", "within_chunk", "middle_injection")) -> dict:
    return {"seed": 13, "M": M, "B": B, "perturbations": list(perturbations), "max_doc_chars": 200}


def score_then_metrics(tmp: Path, variant: dict, proto: dict, task: str, scorer=None, n_queries: int = 4,
                       n_docs: int = 6):
    """score_dataset -> Parquet -> metrics_from_files: the path a workflow job takes."""
    from presdep.contracts.schemas import read_table, write_table
    from presdep.metrics.compute import metrics_from_files
    from presdep.metrics.thresholds import tune_thresholds, write_thresholds
    from presdep.scoring.run import score_dataset

    cand, qrels = fixture(n_queries, n_docs)
    scores_path, qrels_path = tmp / "scores.parquet", tmp / "qrels.parquet"
    write_table(qrels, qrels_path, "qrels")
    score_dataset(cand, dataset="toy", run=ScoringRun.checked(variant), protocol=Protocol.checked(proto), out_path=scores_path, qrels=qrels,
                  scorer=scorer)
    thr = None
    if task == "rerank":
        thr = tmp / "thresholds.json"
        write_thresholds(tune_thresholds(read_table(scores_path, "scores"), qrels), thr)
    m = metrics_from_files(scores_path, qrels_path, tmp / "metrics.parquet", dataset="toy", task=task,
                           variant=variant["scorer"], seed=None, thresholds_path=thr)
    return read_table(scores_path, "scores"), m


def instability_values(metrics):
    """Every tau-PSI and flip value over the shuffled / edited presentations."""
    import polars as pl

    return metrics.filter((pl.col("perturbation") != "first_stage")
                          & (pl.col("metric").str.starts_with("tau_psi") | pl.col("metric").str.contains("flip")))


def tiny_pairrm(out: Path, seed: int = 0) -> Path:
    """A random DebertaV2PairRM of the published layout (config fields included)."""
    from transformers import DebertaV2Config

    from presdep.scoring.pairrm import DebertaV2PairRM

    tok = char_tokenizer()
    ids = tok.convert_tokens_to_ids(["<|source|>", "<|candidate1|>", "<|candidate2|>"])
    cfg = DebertaV2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, max_position_embeddings=2048, pad_token_id=tok.pad_token_id,
                          n_tasks=1, drop_out=0.05, source_prefix_id=ids[0], cand1_prefix_id=ids[1],
                          cand2_prefix_id=ids[2], architectures=["DebertaV2PairRM"])
    torch.manual_seed(seed)
    model = DebertaV2PairRM(cfg).eval()
    with torch.no_grad():
        model.head_layer[-1].weight.mul_(50.0)
    return save(model, tok, out)


def tiny_jina_stub(out: Path, seed: int = 0) -> Path:
    """A model directory whose auto_map points at presdep/rehearsal/jina_standin_modeling.py, copied in
    as modeling.py (a stand-in for jina-reranker-v3's own code; see its docstring)."""
    import json
    import shutil

    from transformers import Qwen3Config

    from presdep.rehearsal import jina_standin_modeling
    from presdep.rehearsal.jina_standin_modeling import StandInJinaForRanking

    tok = char_tokenizer()
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=4096)
    torch.manual_seed(seed)
    from transformers import Qwen3Model

    Qwen3Model(cfg).save_pretrained(out)  # weights under the backbone's names
    tok.save_pretrained(out)
    shutil.copy(jina_standin_modeling.__file__, out / "modeling.py")
    name = StandInJinaForRanking.__name__
    conf = json.loads((out / "config.json").read_text())
    conf.update(architectures=[name], auto_map={"AutoModel": f"modeling.{name}"})
    (out / "config.json").write_text(json.dumps(conf))
    return out
