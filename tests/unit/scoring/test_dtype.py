"""dtype: auto picks bfloat16 only on CPUs with native bfloat16, the choice is recorded in the
scores metadata and the cache identity, and forcing float32 reproduces a direct float32 readout."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from scorers_tiny import saved_tiny_llama

from presdep.config.records import Protocol, ScoringRun
from presdep.contracts.schemas import read_metadata, read_table
from presdep.runtime import models
from presdep.runtime.models import cpu_native_bf16, resolve_dtype, resolve_dtype_choice
from presdep.scoring.run import score_dataset

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
V = {"chunking": "contiguous", "calibration": "none", "bsc_k": 1, "bsc_ensembles": 2, "capcal_beta": 1.0,
     "scorer": "transformers"}
PROTO = {"seed": 3, "M": 2, "B": 2, "perturbations": ["random_shuffle"], "max_doc_chars": 60}


def _flags_oracle() -> set[str]:
    """/proc/cpuinfo flags, read here independently of presdep.runtime.models."""
    try:
        lines = open("/proc/cpuinfo").read().splitlines()
    except OSError:
        return set()
    return {f for ln in lines if ln.split(":")[0].strip() in ("flags", "Features") for f in ln.split(":", 1)[1].split()}


def test_detection_agrees_with_cpuinfo():
    flags = _flags_oracle()
    want = bool({"avx512_bf16", "amx_bf16", "bf16"} & flags)
    native, why = cpu_native_bf16()
    caps = torch._C._cpu._get_cpu_capability() if hasattr(torch._C, "_cpu") else {}
    if not (caps.get("avx512_bf16") or caps.get("amx_bf16")):
        assert native == want, why
    assert ("lacks" in why) != native


def test_auto_follows_the_processor(monkeypatch):
    monkeypatch.setattr(models, "_cpuinfo_flags", lambda path="/proc/cpuinfo": {"avx2", "avx512_bf16"})
    assert resolve_dtype("auto", CPU, inference=True) is torch.bfloat16
    assert resolve_dtype("auto", CPU) is torch.float32  # training keeps float32 on a CPU
    dt, why = resolve_dtype_choice("auto", CPU, inference=True)
    assert "AVX512-BF16" in why
    monkeypatch.setattr(models, "_cpuinfo_flags", lambda path="/proc/cpuinfo": {"avx2"})
    monkeypatch.setattr(torch._C._cpu, "_get_cpu_capability", lambda: {"avx2": True, "avx512_bf16": False,
                                                                       "amx_bf16": False})
    assert resolve_dtype("auto", CPU, inference=True) is torch.float32
    assert resolve_dtype("auto", CUDA, inference=True) is torch.bfloat16
    # A config forces either on any processor.
    assert resolve_dtype_choice("bfloat16", CPU, inference=True) == (torch.bfloat16, "forced by config")
    assert resolve_dtype_choice("float32", CPU, inference=True) == (torch.float32, "forced by config")
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        resolve_dtype("fp8", CPU)


def test_cpuinfo_parsing(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_bf16\n\nprocessor\t: 1\nFeatures\t: fp asimd bf16\n")
    assert models._cpuinfo_flags(str(f)) == {"fpu", "avx2", "amx_bf16", "fp", "asimd", "bf16"}
    assert models._cpuinfo_flags(str(tmp_path / "absent")) == set()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, smollm2_model_dir):
    """A tiny random Llama saved with the real SmolLM2 tokenizer (a directory make_transformers loads)."""
    return saved_tiny_llama(smollm2_model_dir, tmp_path_factory.mktemp("tiny") / "model", seed=1)


def test_by_name_without_torch_as_with_it(monkeypatch):
    """The names a job answered by its cache keeps (no torch import) are the torch objects' names."""
    from presdep.runtime.models import cpu_only_torch, resolve_device, resolve_device_type, resolve_dtype_name

    for flags in ({"avx2", "avx512_bf16"}, {"avx2"}):
        monkeypatch.setattr(models, "_cpuinfo_flags", lambda path="/proc/cpuinfo", f=flags: f)
        monkeypatch.setattr(torch._C._cpu, "_get_cpu_capability", lambda: {"avx512_bf16": False, "amx_bf16": False})
        for device in (CPU, CUDA):
            for dtype in (None, "auto", "float32", "bfloat16", "float16"):
                for inference in (True, False):
                    dt, why = resolve_dtype_choice(dtype, device, inference=inference)
                    assert resolve_dtype_name(dtype, device.type, inference=inference) == (str(dt)[6:], why)
    assert models.cpu_bf16_from_flags() is None  # no flag listed: torch's probe is asked
    monkeypatch.setattr(models, "_cpuinfo_flags", lambda path="/proc/cpuinfo": {"amx_bf16"})
    assert models.cpu_bf16_from_flags() == (True, "CPU has AMX-BF16")
    assert cpu_only_torch() == torch.__version__.endswith("+cpu")
    assert resolve_device_type("auto") == resolve_device("auto").type
    assert [resolve_device_type(d) for d in ("cpu", "cuda:1", "mps")] == ["cpu", "cuda", "mps"]


def _candidates() -> pl.DataFrame:
    rows = [(f"q{q}", f"query {q}", f"q{q}d{r}", f"passage {r} about topic {q} and {r * q}", r, 1.0 / r)
            for q in range(2) for r in range(1, 6)]
    return pl.DataFrame(rows, schema=["query_id", "query", "doc_id", "doc", "first_stage_rank", "first_stage_score"],
                        orient="row").with_columns(pl.col("first_stage_rank").cast(pl.Int32))


def _variant(model_dir, dtype):
    return {**V, "model": {"source": "local", "path": str(model_dir), "dtype": dtype, "batch_size": 4}}


def test_chosen_dtype_is_recorded(tmp_path, model_dir):
    cand = _candidates()
    native, _ = cpu_native_bf16()
    want = "bfloat16" if native else "float32"
    for dtype, expected in (("auto", want), ("bfloat16", "bfloat16"), ("float32", "float32")):
        out = tmp_path / f"{dtype}.parquet"
        score_dataset(cand, dataset="toy", run=ScoringRun.checked(_variant(model_dir, dtype)), protocol=Protocol.checked(PROTO), out_path=out,
                      read_cache=tmp_path / "cache")
        meta = read_metadata(out)
        assert meta["dtype"] == meta["scorer"]["dtype"] == expected, dtype
        assert meta["scorer"]["dtype_reason"].startswith("forced" if dtype != "auto" else "auto:")
    # Each dtype has its own cache identity: bfloat16 reads never answer a float32 prompt.
    idents = {p.parent.name for p in (tmp_path / "cache").glob("*/identity.json")}
    assert len(idents) == 2
    f32 = read_table(tmp_path / "float32.parquet", "scores")["score"].to_numpy()
    bf16 = read_table(tmp_path / "bfloat16.parquet", "scores")["score"].to_numpy()
    assert not np.array_equal(f32, bf16) and np.abs(f32 - bf16).max() < 0.1


def test_forced_float32_equals_a_direct_float32_readout(tmp_path, model_dir):
    """Through config, dtype resolution and the read cache, float32 scores are today's bit for bit:
    every prompt of the job read directly by a float32 model in the same batches (the job's
    batches span queries: one call over both queries' prompts)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from presdep.scoring.backends import TransformersScorer

    cand = _candidates()
    out = tmp_path / "s.parquet"
    score_dataset(cand, dataset="toy", run=ScoringRun.checked(_variant(model_dir, "float32")), protocol=Protocol.checked(PROTO), out_path=out,
                  read_cache=tmp_path / "cache")
    df = read_table(out, "scores")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    direct = TransformersScorer(model, AutoTokenizer.from_pretrained(model_dir), max_doc_chars=60, batch_size=4)
    texts = dict(zip(cand["doc_id"], cand["doc"]))
    order = {"first_stage": 0, "random_shuffle": 1}
    queries = {"q0": "query 0", "q1": "query 1"}
    per_query = {}
    for qid in queries:
        rows = df.filter(pl.col("query_id") == qid)
        prompts = sorted(rows.group_by("perturbation", "presentation", "prompt"),
                         key=lambda kv: (order[kv[0][0]], kv[0][1], kv[0][2]))
        per_query[qid] = [(g, (qid, tuple(g.sort("slot")["doc_id"].to_list()))) for _, g in prompts]
    unique = list(dict.fromkeys(key for qid in queries for _, key in per_query[qid]))  # first-seen order
    read = dict(zip(unique, direct.slot_probs([(queries[q], [texts[d] for d in ds]) for q, ds in unique])))
    for qid in queries:
        for g, key in per_query[qid]:
            for row in g.sort("slot").iter_rows(named=True):
                p = read[key][row["slot"]]
                assert row["score"] == float(p @ np.arange(4, dtype=np.float64))
                assert [row[f"p{k}"] for k in range(4)] == [float(np.float32(x)) for x in p]


def test_published_model_files_get_the_umask_mode_not_mkstemp_0600(tmp_path):
    """A fetched model directory's files are readable like every other output (umask 022 -> 0644)."""
    from presdep.contracts import atomic_files

    def write(tmp):
        weights = tmp / "model.safetensors"
        weights.write_bytes(b"x")
        weights.chmod(0o600)  # what a mkstemp-based writer leaves
        (tmp / "sub").mkdir(mode=0o700)

    umask = atomic_files._UMASK
    try:
        atomic_files._UMASK = 0o022
        atomic_files.write_dir_atomic(tmp_path / "model", write)
    finally:
        atomic_files._UMASK = umask
    assert (tmp_path / "model" / "model.safetensors").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "model" / "sub").stat().st_mode & 0o777 == 0o755
