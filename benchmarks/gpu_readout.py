"""The ``readout`` part of benchmarks/gpu.py: readout throughput and MFU, and two emulated readouts
beside it.

Per batch size, on the same padded, length-sorted batches of the pool, interleaved over the
repeats so that background load hits all alike:

- ``bare``: ``model.model(input_ids)`` on batches already on the device (no LM head);
- ``slot_only``: presdep's readout (``read_built``: pad_batch, decoder, LM head on the B read rows,
  four grade logits, float64 softmax, copy back);
- ``full_vocab_per_position`` (emulation of vLLM's ``prompt_logprobs=20``): the LM head over the
  whole vocabulary at every real position with a next token, float32 log_softmax, the next token's
  logprob and rank, ``torch.topk(k=20)``, copied to the host; then, timed apart, the host builds one
  Python dict {token_id: logprob} per position (top 20 plus the next token), as vLLM's output
  processing does. Its rate is the lower of the device-bound and the host-bound one (vLLM overlaps
  the two in separate processes);
- ``grade_rows_per_position`` (emulation of vLLM's pooling runner with a classifier made of the
  LM head's four grade-token rows, token-level output): hidden states at every real position times
  the [4, hidden] grade rows, copied to the host, where the B read positions are picked and
  softmaxed in float64.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import numpy as np
import torch
from gpu_common import (free, is_oom, length_batches, matmul_rate, param_counts, peak_gib, peak_reserved_gib,
                        read_built, reset_peak, sync)

from presdep.runtime.flops import FLOPS_FORMULA, sequence_flops
from presdep.scoring.readout import pad_batch

TOP_K = 20  # vLLM's prompt_logprobs=20
ROWS = {
    "slot_only": {"emulation": False,
                  "what": "presdep's readout: decoder, LM head on the B read rows only, four grade logits, "
                          "float64 softmax (read_built)"},
    "full_vocab_per_position": {
        "emulation": True, "emulates": "vLLM prompt_logprobs=20",
        "what": "LM head over the whole vocabulary at every real position with a next token, float32 "
                "log_softmax, the next token's logprob and rank, topk(20), copied to the host; then host-side "
                "dicts {token_id: logprob} of the top 20 plus the next token per position. A lower bound on "
                "vLLM's host cost: it also makes Logprob objects and passes the tensors between processes",
        "rate": "min(device-bound, host-bound) tokens/s: vLLM overlaps the two in separate processes"},
    "grade_rows_per_position": {
        "emulation": True, "emulates": "vLLM pooling runner, token-level output, classifier = the LM head's "
                                       "four grade-token rows",
        "what": "hidden states at every real position times the [4, hidden] grade rows, copied to the host; "
                "the B read positions picked and softmaxed (float64) on the host",
        "rate": "min(device-bound, host-bound) tokens/s, as for full_vocab_per_position"},
}


def _flat_rows(prompts: list, width: int, drop_last: bool) -> np.ndarray:
    """Row indices into a [batch * width] view of the real positions (without each prompt's last
    one when ``drop_last``: it has no next token); computed on the host, so no device sync."""
    return np.concatenate([k * width + np.arange(len(p.ids) - int(drop_last)) for k, p in enumerate(prompts)])


def position_logprob_dicts(top_ids: np.ndarray, top_lp: np.ndarray, nxt: np.ndarray, nxt_lp: np.ndarray,
                           prompts: list) -> list[list]:
    """vLLM's prompt logprobs as the host holds them: per prompt [None] + one dict per position
    {next token: its logprob, then the top-k ids: theirs} (21 entries, 20 where the next token is in the top k)."""
    out, at = [], 0
    ids_l, lp_l, n_l, nl_l = top_ids.tolist(), top_lp.tolist(), nxt.tolist(), nxt_lp.tolist()
    for p in prompts:
        n = len(p.ids) - 1
        per: list = [None]
        for j in range(at, at + n):
            d = {n_l[j]: nl_l[j]}
            d.update(zip(ids_l[j], lp_l[j]))
            per.append(d)
        out.append(per)
        at += n
    return out


def full_vocab_pass(model, pool, batches, pad_id, device, chunk_rows: int) -> tuple[float, float, dict]:
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    t_dev = t_host = 0.0
    positions = entries = 0
    for idx in batches:
        prompts = [pool[i] for i in idx]
        t0 = time.perf_counter()
        with torch.inference_mode():
            ids = pad_batch(prompts, pad_id, device)[0]
            hidden = decoder(input_ids=ids, use_cache=False).last_hidden_state
            width = ids.shape[1]
            rows = torch.as_tensor(_flat_rows(prompts, width, True), device=ids.device)
            h = hidden.reshape(-1, hidden.shape[-1]).index_select(0, rows)
            nxt = ids.reshape(-1).index_select(0, rows + 1)  # row-major: the next column is the next token
            parts = []
            for s in range(0, h.shape[0], chunk_rows):  # the full [n, vocab] float32 tensor would not fit
                lp = torch.log_softmax(head(h[s : s + chunk_rows]).float(), dim=-1)
                t_lp = lp.gather(-1, nxt[s : s + chunk_rows, None])
                rank = (lp >= t_lp).sum(-1)
                v, i = torch.topk(lp, TOP_K, dim=-1)
                parts.append((i, v, t_lp[:, 0], rank))
                del lp
            top_i, top_v, n_lp, _ = (torch.cat(x).cpu().numpy() for x in zip(*parts))
            nxt_h = nxt.cpu().numpy()
        t1 = time.perf_counter()
        dicts = position_logprob_dicts(top_i, top_v, nxt_h, n_lp, prompts)
        t2 = time.perf_counter()
        t_dev, t_host = t_dev + (t1 - t0), t_host + (t2 - t1)
        positions += len(nxt_h)
        entries += sum(len(d) for per in dicts for d in per[1:])
        del dicts, hidden, h
    return t_dev, t_host, {"positions": positions, "dict_entries_per_position": entries / max(1, positions)}


def grade_rows_pass(model, pool, batches, pad_id, grade_ids, device) -> tuple[float, float, dict]:
    decoder = model.get_decoder()
    w = model.get_output_embeddings().weight[list(grade_ids)].detach()  # [4, hidden], loaded once as vLLM would
    t_dev = t_host = 0.0
    probs: dict = {}
    for idx in batches:
        prompts = [pool[i] for i in idx]
        t0 = time.perf_counter()
        with torch.inference_mode():
            ids = pad_batch(prompts, pad_id, device)[0]
            hidden = decoder(input_ids=ids, use_cache=False).last_hidden_state
            rows = torch.as_tensor(_flat_rows(prompts, ids.shape[1], False), device=ids.device)
            logits = (hidden.reshape(-1, hidden.shape[-1]).index_select(0, rows) @ w.T).float().cpu().numpy()
        t1 = time.perf_counter()
        at = 0
        for i, p in zip(idx, prompts):
            x = logits[at + np.asarray(p.read_positions)].astype(np.float64)
            e = np.exp(x - x.max(axis=1, keepdims=True))
            probs[i] = e / e.sum(axis=1, keepdims=True)
            at += len(p.ids)
        t_host += time.perf_counter() - t1
        t_dev += t1 - t0
        del hidden
    return t_dev, t_host, {"probs": probs}


def _time_rows(fns: dict[str, Callable[[], tuple[float, float, dict]]], repeats: int, device: Any) -> dict:
    """Warm each row up alone (its peak memory; an OOM drops that row only), then time the live
    rows interleaved, ``repeats`` times; figures are medians."""
    out: dict = {}
    live = []
    for name, fn in fns.items():
        try:
            reset_peak(device)
            info = fn()[2]
            out[name] = {"oom": False, "peak_memory_gib": peak_gib(device),
                         "peak_reserved_gib": peak_reserved_gib(device), "seconds_device": [],
                         "seconds_host": [], "_info": info}
            live.append(name)
        except (RuntimeError, MemoryError) as exc:
            if not is_oom(exc):
                raise
            out[name] = {"oom": True, "error": str(exc).splitlines()[0][:300]}
        free(device)
    for _ in range(repeats):
        for name in list(live):
            try:
                d, h, _ = fns[name]()
            except (RuntimeError, MemoryError) as exc:
                if not is_oom(exc):
                    raise
                out[name] = {"oom": True, "error": str(exc).splitlines()[0][:300]}
                live.remove(name)
                free(device)
                continue
            out[name]["seconds_device"].append(d)
            out[name]["seconds_host"].append(h)
    return out


def part_readout(model, synth, pool, shape, args, device, deadline: float,
                 progress: Callable[[dict], None] | None = None) -> dict:
    """Per batch size in ``args.batch_sizes``; after the first, a batch size starts only if the slowest
    one so far would end before ``deadline`` (perf_counter); the rest are in ``skipped_batch_sizes``.
    ``progress`` gets the part's figures so far after each batch size (written at once)."""
    counts = param_counts(model)
    cfg = model.config
    d_attn = cfg.num_attention_heads * cfg.head_dim
    rate = matmul_rate(device, next(model.parameters()).dtype, shape["matmul_n"], shape["matmul_reps"])
    peak = rate["best_flops_per_s"]
    chunk_rows = max(1, (2 << 30) // (4 * cfg.vocab_size))  # 2 GiB of float32 logits per chunk

    def flops(lengths):
        return sum(sequence_flops(n, counts["non_embedding"], cfg.num_hidden_layers, d_attn) for n in lengths)

    # Warm-up: kernels, allocator, cuBLAS handles.
    read_built(model, pool[:1], 1, synth.pad_id, synth.grade_ids, device)
    rows: list = []
    skipped: list = []
    out = {"matmul": rate, "params": counts, "d_attn": d_attn, "flops_formula": FLOPS_FORMULA,
           "prompt_tokens": {"min": min(len(p.ids) for p in pool), "max": max(len(p.ids) for p in pool),
                             "mean": statistics.mean(len(p.ids) for p in pool)},
           "timing": ("median over repeats of the whole pool's reads; readout = pad_batch on the host, "
                      "copy to the device, decoder, LM head on the read rows, softmax, copy back (read_built); "
                      "bare = model.model(input_ids, use_cache=False) on the same padded batches already on "
                      "the device; the emulated rows are timed interleaved with both, their seconds_device "
                      "up to the copy to the host and their seconds_host after it"),
           "memory": ("per row, from its untimed first pass: peak_memory_gib = torch.cuda.max_memory_allocated, "
                      "peak_reserved_gib = torch.cuda.max_memory_reserved (both reset, cache emptied, before "
                      "the row; null off CUDA)"),
           "rows": ROWS, "top_k": TOP_K, "logits_chunk_rows": chunk_rows,
           "repeats": args.repeats, "batch_sizes": rows, "skipped_batch_sizes": skipped}
    slowest = 0.0  # seconds of the slowest batch size so far: the estimate of the next one
    for bs in args.batch_sizes:
        if rows and time.perf_counter() + slowest > deadline:  # the first one always: the part started
            skipped.append(bs)
            continue
        t_bs = time.perf_counter()
        batches = length_batches(pool, bs)
        real = [len(p.ids) for p in pool]
        padded_lengths = [max(len(pool[i].ids) for i in b) for b in batches for _ in b]
        tokens = sum(real)
        row: dict = {"batch_size": bs, "prompts": len(pool), "batches": len(batches), "tokens": tokens,
                     "padded_tokens": sum(padded_lengths), "padding_fraction": 1.0 - tokens / sum(padded_lengths)}
        dev_ids = [pad_batch([pool[i] for i in b], synth.pad_id, device)[0] for b in batches]
        slot_probs: list = []

        def bare():
            t0 = time.perf_counter()
            with torch.inference_mode():
                for ids in dev_ids:
                    model.model(input_ids=ids, use_cache=False)
            sync(device)
            return time.perf_counter() - t0, 0.0, {}

        def slot():
            t0 = time.perf_counter()
            slot_probs[:] = read_built(model, pool, bs, synth.pad_id, synth.grade_ids, device)
            sync(device)
            return time.perf_counter() - t0, 0.0, {}

        timed = _time_rows({
            "slot_only": slot, "bare": bare,
            "full_vocab_per_position": lambda: full_vocab_pass(model, pool, batches, synth.pad_id, device,
                                                               chunk_rows),
            "grade_rows_per_position": lambda: grade_rows_pass(model, pool, batches, synth.pad_id, synth.grade_ids,
                                                               device),
        }, args.repeats, device)
        dev_ids.clear()
        so, ba = timed["slot_only"], timed["bare"]
        if so["oom"] or ba["oom"]:
            row.update({"oom": True, "error": so.get("error") or ba.get("error")})
        else:
            tr, tb = statistics.median(so["seconds_device"]), statistics.median(ba["seconds_device"])
            f_real, f_pad = flops(real), flops(padded_lengths)
            row.update({
                "seconds_readout": so["seconds_device"], "seconds_bare": ba["seconds_device"],
                "tokens_per_s_readout": tokens / tr, "tokens_per_s_bare": tokens / tb,
                "overhead_ratio": tr / tb,
                "model_flops": f_real,
                "flops_per_s_readout": f_real / tr, "flops_per_s_bare": f_real / tb,
                "mfu_readout": f_real / tr / peak, "mfu_bare": f_real / tb / peak,
                "mfu_padded_readout": f_pad / tr / peak, "mfu_padded_bare": f_pad / tb / peak,
                "peak_memory_gib_readout": so["peak_memory_gib"], "peak_memory_gib_bare": ba["peak_memory_gib"],
                "peak_reserved_gib_readout": so["peak_reserved_gib"], "peak_reserved_gib_bare": ba["peak_reserved_gib"],
                "oom": False,
            })
        row["rows"] = _row_figures(timed, tokens, row.get("tokens_per_s_readout"), slot_probs)
        free(device)
        row["elapsed_s"] = time.perf_counter() - t_bs
        slowest = max(slowest, row["elapsed_s"])
        rows.append(row)
        if progress is not None:
            progress(out)
    return out


def _row_figures(timed: dict, tokens: int, slot_rate: float | None, slot_probs: list) -> dict:
    """Per readout row: prompt tokens/s (device-bound, host-bound, the lower of the two) and its
    ratio to slot_only's tokens/s of this batch size."""
    out: dict = {}
    for name in ("slot_only", "full_vocab_per_position", "grade_rows_per_position"):
        t = timed[name]
        if t["oom"]:
            out[name] = {"oom": True, "error": t["error"], "emulation": ROWS[name]["emulation"]}
            continue
        d, h = statistics.median(t["seconds_device"]), statistics.median(t["seconds_host"])
        r = {"emulation": ROWS[name]["emulation"], "oom": False, "seconds_device": t["seconds_device"],
             "seconds_host": t["seconds_host"], "tokens_per_s_device": tokens / d,
             "tokens_per_s_host": tokens / h if h > 0 else None, "peak_memory_gib": t["peak_memory_gib"],
             "peak_reserved_gib": t["peak_reserved_gib"]}
        r["tokens_per_s"] = min(x for x in (r["tokens_per_s_device"], r["tokens_per_s_host"]) if x is not None)
        r["tokens_per_s_serial"] = tokens / (d + h)
        r["ratio_to_slot_only"] = r["tokens_per_s"] / slot_rate if slot_rate else None
        info = t["_info"]
        if name == "full_vocab_per_position":
            r.update(info)
        if name == "grade_rows_per_position" and slot_probs:
            # The same P(grade) as the slot-only readout, up to the kernels' rounding.
            r["max_abs_delta_p_vs_slot_only"] = max(float(np.abs(info["probs"][i] - p).max())
                                                    for i, p in enumerate(slot_probs))
        out[name] = r
    return out
