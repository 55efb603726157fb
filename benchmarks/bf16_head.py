"""Benchmark: what a bf16 LM head's rounding does to E[g] and tau-PSI, on a real model.

SmolLM2-135M-Instruct reads Q DL19 queries under M shuffles of their first B BM25 passages
(shuffle m is ``random.Random(m).shuffle``, as the protocol draws them). Each prompt runs the
decoder once; its hidden rows at the read positions, and the head, in bfloat16 as a bf16 model
holds them, then go through both heads in the same process:

- ``float32 rows`` (presdep's readout): the grade rows of the head times the hidden rows in
  float32 (:func:`presdep.scoring.readout.grade_head_logits`);
- ``bf16 head`` (the former readout): ``head(rows)[..., grade ids]`` in the model's dtype, so
  each logit is rounded to bfloat16 before the softmax.

Printed: the largest |logit| and |E[g]| differences, the share of slots whose E[g] ties another
slot's in the same prompt, and tau-PSI per query both ways with their mean ratio.

``--dtype float32`` (the default) runs the decoder in float32 and rounds its hidden rows and the
head to bfloat16 before the heads: on a CPU without bfloat16 instructions a bf16 decoder is
about 100 times slower, and the decoder's own precision is not what is compared here.
``--dtype bfloat16`` runs the whole model in bfloat16.

    python benchmarks/bf16_head.py [--data PATH] [--model DIR] [--queries 4] [--M 4] [--B 8]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "trec-dl19" / "bm25_retrieve_results_dl19_top100.json"


def tie_share(eg) -> float:
    """Share of slots whose E[g] equals another slot's in the same prompt."""
    import numpy as np

    shares = [np.mean([np.sum(row == v) > 1 for v in row]) for row in eg]
    return float(np.mean(shares))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="rank_llm JSON (DL19 BM25 top-100)")
    ap.add_argument("--model", type=Path,
                    default=Path(os.environ.get("PRESDEP_SMOLLM2_DIR", REPO / "resources" / "models" / "smollm2")))
    ap.add_argument("--queries", type=int, default=4)
    ap.add_argument("--M", type=int, default=4)
    ap.add_argument("--B", type=int, default=8)
    ap.add_argument("--max-doc-chars", type=int, default=600)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="the decoder's dtype")
    ap.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    args = ap.parse_args(argv)

    import numpy as np
    import torch
    from tqdm.auto import tqdm

    from presdep.metrics.instability import tau_psi
    from presdep.runtime.models import load_model
    from presdep.scoring.backends import TransformersScorer
    from presdep.scoring.readout import expected_grade, grade_head_logits, grade_probs

    if not args.data.exists():
        sys.exit(f"benchmark data not found: {args.data} (pass --data)")
    if not (args.model / "config.json").exists():
        sys.exit(f"no model directory at {args.model}; run presdep.runtime.models.fetch_smollm2 or pass --model")
    torch.set_num_threads(args.threads)
    model, tok = load_model(args.model, device="cpu", dtype=args.dtype)
    scorer = TransformersScorer(model, tok, max_doc_chars=args.max_doc_chars, batch_size=1)
    gids = list(scorer.grade_ids)
    decoder = model.get_decoder()
    head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=False, dtype=torch.bfloat16)
    with torch.no_grad():
        head.weight.copy_(model.get_output_embeddings().weight)  # the head as a bf16 model holds it
    data = json.loads(args.data.read_text())[: args.queries]

    scores = {"float32_rows": np.zeros((len(data), args.M, args.B)), "bf16_head": np.zeros((len(data), args.M, args.B))}
    eg_rows: dict[str, list] = {k: [] for k in scores}
    max_logit_diff = max_logit = 0.0
    bar = tqdm(total=len(data) * args.M, desc="bf16 head", unit="prompt")
    for q, entry in enumerate(data):
        docs = [h["content"] for h in entry["hits"][: args.B]]
        for m in range(args.M):
            order = list(range(args.B))
            random.Random(m).shuffle(order)
            built = scorer.build(entry["query"], [docs[i] for i in order])
            with torch.inference_mode():
                hidden = decoder(input_ids=torch.tensor([built.ids]), use_cache=False).last_hidden_state[0]
                rows = hidden[torch.tensor(built.read_positions)].to(torch.bfloat16)
                exact = grade_head_logits(model, head, rows, gids)
                rounded = head(rows)[..., gids]
            max_logit_diff = max(max_logit_diff, float((exact - rounded.float()).abs().max()))
            max_logit = max(max_logit, float(exact.abs().max()))
            for name, logits in (("float32_rows", exact), ("bf16_head", rounded)):
                eg = expected_grade(grade_probs(logits)).numpy()
                eg_rows[name].append(eg)
                scores[name][q, m, order] = eg  # back to the first-stage order of the documents
            bar.update()
    bar.close()
    psi = {name: tau_psi(s) for name, s in scores.items()}
    result = {
        "model": str(args.model), "decoder_dtype": args.dtype, "head_and_rows_dtype": "bfloat16", "queries": len(data), "M": args.M, "B": args.B,
        "max_abs_logit": max_logit,
        "max_abs_logit_diff": max_logit_diff,
        "max_abs_eg_diff": float(np.abs(scores["float32_rows"] - scores["bf16_head"]).max()),
        "tied_slot_share": {name: tie_share(rows) for name, rows in eg_rows.items()},
        "tau_psi": {name: [round(float(x), 6) for x in v] for name, v in psi.items()},
        "mean_tau_psi": {name: float(np.mean(v)) for name, v in psi.items()},
        "max_abs_tau_psi_diff": float(np.abs(psi["float32_rows"] - psi["bf16_head"]).max()),
    }
    result["mean_tau_psi_ratio_bf16_over_float32"] = (
        result["mean_tau_psi"]["bf16_head"] / result["mean_tau_psi"]["float32_rows"]
        if result["mean_tau_psi"]["float32_rows"] else None)
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
