"""The ``score_job`` part of benchmarks/gpu.py: a real ``presdep.scoring.run.score_dataset`` job on a
tiny Qwen3 saved to disk (a character tokenizer with a chat template), on the benchmark's device.

It needs polars (presdep's tables); benchmarks/gpu.py runs it only where polars imports.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np


def _char_tokenizer():
    """One token per printable character, with a chat template (digits are single tokens)."""
    import string

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    chars = [c for c in string.printable if c not in "\x0b\x0c\r"]
    vocab = {t: i for i, t in enumerate(specials + chars)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("<\\|[a-z_0-9]+\\|>|."), behavior="isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", unk_token="<unk>", eos_token="</s>",
                                  additional_special_tokens=specials[4:])
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return tok


def part_score_job(device) -> dict:
    """Score 2 queries x 6 passages; the table's and the scorer's dtype and device, as recorded."""
    import polars as pl
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from presdep.config.records import Protocol, ScoringRun
    from presdep.contracts.schemas import read_metadata, read_table
    from presdep.scoring.factory import make_scorer
    from presdep.scoring.run import score_dataset

    with tempfile.TemporaryDirectory(prefix="presdep-gpu-bench-") as tmp_name:
        tmp = Path(tmp_name)
        tok = _char_tokenizer()
        cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=4096,
                          tie_word_embeddings=True)
        torch.manual_seed(3)
        model = Qwen3ForCausalLM(cfg).eval()
        model.save_pretrained(tmp / "model")
        tok.save_pretrained(tmp / "model")
        rows = [(f"q{q}", f"query {q}", f"q{q}d{r}", f"passage {r} about topic {q} and {r * q}", r, 1.0 / r)
                for q in range(2) for r in range(1, 7)]
        cand = pl.DataFrame(rows, schema=["query_id", "query", "doc_id", "doc", "first_stage_rank",
                                          "first_stage_score"], orient="row").with_columns(
            pl.col("first_stage_rank").cast(pl.Int32))
        variant = {"chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 2,
                   "capcal_beta": 1.0, "scorer": "transformers",
                   "model": {"source": "local", "path": str(tmp / "model"), "device": str(device), "dtype": "auto",
                             "batch_size": 4}}
        run = ScoringRun.checked(variant)
        protocol = Protocol.checked({"seed": 3, "M": 2, "B": 3, "perturbations": ["random_shuffle"],
                                     "max_doc_chars": 60})
        scorer = make_scorer(run, protocol.prompt)
        out = tmp / "scores.parquet"
        profile = score_dataset(cand, dataset="toy", run=run, protocol=protocol, out_path=out, scorer=scorer,
                                read_cache=tmp / "cache")
        meta = read_metadata(out)
        table = read_table(out, "scores")
        ident = scorer.cache_identity()
        return {"rows": table.height, "dtype": meta.get("dtype"), "scorer_dtype": meta["scorer"].get("dtype"),
                "dtype_reason": meta["scorer"].get("dtype_reason"), "device_type": meta["scorer"].get("device_type"),
                "model_device": str(scorer.device), "cache_identity": ident,
                "read_cache": meta.get("read_cache"), "profile": profile,
                "scores_finite": bool(np.isfinite(table["score"].to_numpy()).all())}
