"""A stand-in for jina-reranker-v3's own remote code (its published modeling.py); it is not that code.

Jina AI's file cannot be fetched offline, so presdep ships this one for its tests and its
rehearsal. It keeps the published call signature
(``rerank(query, documents) -> [{"document", "relevance_score", "index"}]``, sorted by
score) and the architecture class (a Qwen3 backbone reading the query and every
document in one causal context, scoring each document's last-token state against the
query's). A model folder carries it as ``modeling.py`` with ``auto_map`` in its config,
loaded through ``trust_remote_code``: the path the real model takes. Its scores mean
nothing; no table row may come from it.

The file imports only torch and transformers, so it still loads once copied out of presdep.
"""

import torch
from transformers import AutoTokenizer, Qwen3Model, Qwen3PreTrainedModel


class StandInJinaForRanking(Qwen3PreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.model = Qwen3Model(config)
        self.post_init()
        self._tok = None

    def forward(self, input_ids, attention_mask=None):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    @torch.no_grad()
    def rerank(self, query, documents, top_n=None):
        if self._tok is None:
            self._tok = AutoTokenizer.from_pretrained(self.config._name_or_path)
        ids, ends = [], []
        for d in documents:
            ids += self._tok(f"<|im_start|>{d}", add_special_tokens=False)["input_ids"]
            ends.append(len(ids) - 1)
        ids += self._tok(f"<|im_start|>{query}", add_special_tokens=False)["input_ids"]
        h = self.forward(torch.tensor([ids], device=self.device))[0]
        q = h[len(ids) - 1]
        scores = torch.nn.functional.cosine_similarity(h[ends], q.unsqueeze(0), dim=-1).float().tolist()
        out = [{"document": d, "relevance_score": s, "index": i} for i, (d, s) in enumerate(zip(documents, scores))]
        out.sort(key=lambda r: -r["relevance_score"])
        return out[:top_n] if top_n else out
