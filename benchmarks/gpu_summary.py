"""The text summary benchmarks/gpu.py prints after its JSON: one block per part, in run order."""

from __future__ import annotations

from typing import Any


def _fmt(x: Any, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def _row_cells(r: dict) -> str:
    rows = r.get("rows", {})
    fv, gr = rows.get("full_vocab_per_position", {}), rows.get("grade_rows_per_position", {})
    fv_cells = ("OOM | | " if fv.get("oom") else
                f"{fv['tokens_per_s_device']:.4g} | {_fmt(fv['tokens_per_s_host'], '.4g')} | "
                f"{fv['ratio_to_slot_only']:.3f} ")
    gr_cells = "OOM |" if gr.get("oom") else f"{gr['tokens_per_s']:.4g} ({gr['ratio_to_slot_only']:.3f}) |"
    return f"| {fv_cells}| {gr_cells}"


def _readout(ro: dict) -> list[str]:
    m = ro["matmul"]
    lines = [f"readout: {ro['params']['non_embedding'] / 1e9:.3g} B non-embedding params, prompts "
             f"{ro['prompt_tokens']['min']}-{ro['prompt_tokens']['max']} tokens; matmul {m['n']}^3 "
             f"{m['dtype']}: {m['best_flops_per_s'] / 1e12:.4g} TFLOP/s",
             "   | batch | tokens/s slot_only | tokens/s bare | overhead | MFU slot_only | MFU bare | peak GiB "
             "(reserved) | EMULATED full_vocab tokens/s device | host | ratio | EMULATED grade_rows tokens/s (ratio) |"]
    for r in ro["batch_sizes"]:
        if r.get("oom"):
            lines.append(f"   | {r['batch_size']} | OOM | | | | | | | | | |")
            continue
        lines.append(f"   | {r['batch_size']} | {r['tokens_per_s_readout']:.4g} | {r['tokens_per_s_bare']:.4g} | "
                     f"{r['overhead_ratio']:.3f} | {r['mfu_readout']:.3f} | {r['mfu_bare']:.3f} | "
                     f"{_fmt(r['peak_memory_gib_readout'], '.2f')} ({_fmt(r.get('peak_reserved_gib_readout'), '.2f')}) "
                     f"{_row_cells(r)}")
    lines.append("   EMULATED rows (not vLLM itself): full_vocab = vLLM prompt_logprobs=20 (ratio from the lower "
                 "of device and host rates); grade_rows = vLLM token-level pooling with the 4 grade rows")
    return lines


def _lora(lo: dict) -> list[str]:
    lines = []
    for r in lo.get("settings", []):
        what = (f"lora step ({lo['prompts_per_step']} prompts), checkpointing "
                f"{'on' if r['gradient_checkpointing'] else 'off'}, mask {'on' if r['padding_mask'] else 'off'}, "
                f"adapters {r['adapter_weights']}, dropout {r['dropout']:g}")
        if "skipped" in r:
            lines.append(f"{what}: skipped ({r['skipped']})")
        elif "fits" not in r:
            lines.append(f"{what}: failed ({r.get('error', '')[:120]})")
        elif not r["fits"]:
            lines.append(f"{what}: one chunk does not fit ({r.get('error', '')[:80]})")
        elif r.get("oom"):
            lines.append(f"{what}: OOM (predicted {r['predicted_peak_gib']:.2f} GiB)")
        elif "tokens_per_s" not in r:
            lines.append(f"{what}: failed ({r.get('error', '')[:120]})")
        else:
            steps = ", ".join(f"{t:.3g}" for t in r["seconds_per_step_all"])
            lines.append(f"{what}, SDPA {r['sdpa_backend_probe']}: {r['micro_batches']} micro-batches, steps "
                         f"{steps} s (mean {r['seconds_per_step']:.3g}), {r['tokens_per_s']:.4g} tokens/s (last "
                         f"step), peak {_fmt(r['peak_memory_gib'], '.2f')} GiB, reserved "
                         f"{_fmt(r['peak_reserved_gib'], '.2f')} GiB, predicted {r['predicted_peak_gib']:.2f} GiB")
    return lines


def summary(result: dict) -> str:
    env, parts = result["environment"], result["parts"]
    lines = [f"presdep GPU benchmark on {env.get('device_name')} ({env['device']}), torch {env['torch']}, "
             f"transformers {env['transformers']}; shape {result['shape_name']}, dtype {result['dtype']}, "
             f"total {result['elapsed_s']:.1f} s of a {result['budget']['seconds']:.0f} s budget; parts in order "
             + ", ".join(result["budget"]["order"])]
    if any(parts.get(k, {}).get("weights") == "random" for k in ("precision", "grade_logits", "noise")):
        lines.append("RANDOM WEIGHTS (precision, grade_logits, noise): kernel-level figures, not a trained "
                     "Qwen3-4B's score distribution")
    pr = parts.get("precision", {})
    if "max_abs_delta_eg" in pr:
        lines.append(f"precision: bf16 vs fp32 E[g] over {pr['slots']} slots: mean {pr['mean_abs_delta_eg']:.3g}, "
                     f"max {pr['max_abs_delta_eg']:.3g}")
    gl = parts.get("grade_logits", {})
    if "max_abs_logit_diff" in gl:
        lines.append(f"grade_logits: bf16 full head vs fp32 grade rows over {gl['slots']} slots: logits max "
                     f"{gl['max_abs_logit_diff']:.3g}, E[g] max {gl['max_abs_eg_diff']:.3g}; tied E[g] share "
                     f"{gl['tied_fraction_bf16_head']:.3g} (bf16 head) vs {gl['tied_fraction_fp32_rows']:.3g} "
                     f"(fp32 rows); logits shifted to " + ", ".join(
                         f"{k}: ties {v['tied_fraction_bf16_head']:.3g}, E[g] max {v['max_abs_eg_diff']:.3g}"
                         for k, v in gl["shifted_logits"].items()))
    sj = parts.get("score_job", {})
    if "dtype" in sj:
        lines.append(f"score_job: score_dataset on {sj['device_type']}: {sj['rows']} rows, dtype {sj['dtype']}, "
                     f"cache identity dtype {sj['cache_identity']['dtype']} / {sj['cache_identity']['device_type']}")
    no = parts.get("noise", {})
    if "max_abs_delta_eg" in no:
        lines.append(f"noise: batch {no['batch_size']}, {no['reads_per_prompt']} reads x {no['prompts']} "
                     f"prompts: alone vs alone max {no['alone_vs_alone_max_abs']:.3g}; batched vs alone mean "
                     f"{no['mean_abs_delta_eg']:.3g}, max {no['max_abs_delta_eg']:.3g}; tau-PSI mean "
                     f"{no['tau_psi_mean']:.3g}, max {no['tau_psi_max']:.3g}")
    ro = parts.get("readout", {})
    if ro.get("batch_sizes"):
        lines += _readout(ro)
    lines += _lora(parts.get("lora", {}))
    lines.append("rates (presdep plan --rates): " + ", ".join(
        f"{k} {v if isinstance(v, str) else _fmt(v, '.4g')}" for k, v in result["rates"].items()))
    for name, why in result["skipped"].items():
        lines.append(f"   skipped {name}: {why}")
    return "\n".join(lines)
