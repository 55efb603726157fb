"""`presdep plan`'s bill: prompts counted as the code lays them out, FLOPs by the formula, GPU-hours
at measured or assumed rates, and the paper's bill in the cluster guide kept current.

Oracles: the prompts and rows a real ``score_dataset`` job reads and writes on a small candidates
file (a recording scorer, noise re-reads included), the silver-label layout of
``presdep.training.silver``, the reader's contexts of ``presdep.scoring.reader``, and FLOPs
worked out here by hand from Qwen3-4B's sizes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from presdep.config.catalogue import load_catalogue
from presdep.config.records import Dataset, Protocol, ScoringRun, Variant
from presdep.contracts.readouts import GradeReadout
from presdep.report import plan_guide
from presdep.report.plan import load_config
from presdep.report.plan_rates import LOGPROBS_HOST_CAP, PEAK_BF16_FLOPS, READOUT_MFU, Rates, load_rates
from presdep.report.plan_shapes import flops_per_token
from presdep.report.plan_sizes import Load, dataset_size, reader_load, score_load, silver_load
from presdep.report.plan_stages import job_cost, plan_bill
from presdep.report.plan_work import NOISE_SCORERS, Job, Part
from presdep.scoring.reader import top_k_contexts
from presdep.scoring.run import score_dataset
from presdep.training.memory_model import known_shape
from presdep.training.silver import silver_prompts

REPO = Path(__file__).resolve().parents[3]
PRESDEP = Path(sys.executable).with_name("presdep")
QWEN = known_shape("Qwen/Qwen3-4B")
# Qwen3-4B by hand: 36 layers x (q, k, v, o: 2560*4096 + 2*2560*1024 + 4096*2560; MLP 3*2560*9728;
# norms 2*2560 + 2*128) + the final norm 2560 = 3,633,511,936 weights besides the embedding.
N_QWEN = 36 * (2560 * 4096 + 2 * 2560 * 1024 + 4096 * 2560 + 3 * 2560 * 9728 + 2 * 2560 + 2 * 128) + 2560


def _candidates(sizes=(7, 5, 3, 9)) -> pl.DataFrame:
    rows = [{"query_id": f"q{q}", "query": f"query {q} " * (q + 1), "doc_id": f"q{q}-d{d}",
             "doc": f"  document {d}\n of query {q} " * (d + 2), "first_stage_rank": d + 1}
            for q, n in enumerate(sizes) for d in range(n)]
    return pl.DataFrame(rows)


def _qrels(c: pl.DataFrame) -> pl.DataFrame:
    # q1 has no relevant candidate, so middle_injection skips it
    rel = c.filter(pl.col("query_id") != "q1").group_by("query_id").agg(pl.col("doc_id").first())
    return rel.select("query_id", "doc_id", pl.lit(2).alias("relevance"))


class Recording:
    """Counts every prompt score_dataset reads, re-reads included."""

    name = "recording"

    def __init__(self, noise: bool):
        self.prompts = 0
        if noise:
            self.reread_in_batches = self._reread

    def score_prompts(self, prompts):
        self.prompts += len(prompts)
        return self._read(prompts)

    def _reread(self, targets, companions, rereads, seed):
        self.prompts += rereads * len(targets)
        return [self._read(targets) for _ in range(rereads)]

    @staticmethod
    def _read(prompts):
        return [[GradeReadout(float(i % 4), (0.25, 0.25, 0.25, 0.25)) for i in range(len(d))] for _, d in prompts]


def _variant(**kw) -> Variant:
    spec = {"scorer": "transformers", "chunking": "contiguous", "calibration": "none", "bsc_k": 1,
            "bsc_ensembles": 1, **kw}
    return Variant.checked(spec, name="v")


CASES = {
    "plain": (_variant(), {"perturbations": ["random_shuffle"]}),
    "round_robin_and_noise": (_variant(chunking="round_robin"), {"perturbations": ["random_shuffle"], "noise_rereads": 2}),
    "bsc_all_perturbations": (_variant(bsc_k=2, bsc_ensembles=2),
                              {"perturbations": ["random_shuffle", "within_chunk", "middle_injection"]}),
}


@pytest.mark.parametrize("case", CASES)
def test_score_prompts_and_rows_equal_what_score_dataset_reads_and_writes(tmp_path, case):
    v, extra = CASES[case]
    p = Protocol.checked({"seed": 7, "M": 3, "B": 3, "max_doc_chars": 40, **extra})
    cands, qrels = _candidates(), None
    (tmp_path / "tiny").mkdir()
    cands.write_parquet(tmp_path / "tiny" / "candidates.parquet")
    if "middle_injection" in p.perturbations:
        qrels = _qrels(cands)
        qrels.write_parquet(tmp_path / "tiny" / "qrels.parquet")
    ds = Dataset.from_spec("tiny", {"task": "rerank", "role": "eval", "candidates": {"format": "parquet"}}, p)
    size = dataset_size(ds, load_catalogue(), tmp_path)
    assert size.exact and size.queries == 4 and str(tmp_path) in size.source
    noise = v.scorer in NOISE_SCORERS and p.noise_rereads >= 2
    base, reread, rows = score_load(size, v, p, noise=noise)

    scorer = Recording(noise)
    out = tmp_path / "scores.parquet"
    score_dataset(cands, dataset="tiny", run=ScoringRun(variant=v), protocol=p, out_path=out, qrels=qrels,
                  scorer=scorer)
    assert base.prompts + reread.prompts == scorer.prompts
    assert rows == pl.read_parquet(out).height
    assert (reread.prompts > 0) == noise


def test_a_config_bill_counts_the_fixture_on_disk_exactly(tmp_path):
    cfg = load_config([], base=REPO / "workflow_config.yaml")  # the embedded default: dataset "synthetic"
    cands = _candidates()
    (tmp_path / "synthetic").mkdir()
    cands.write_parquet(tmp_path / "synthetic" / "candidates.parquet")
    work = {w["job"]: w for w in plan_bill(cfg, Rates(), results=tmp_path, resources=None).work}
    for run in ("off_the_shelf", "round_robin", "bsc"):
        v, p = cfg.variants[run], cfg.datasets["synthetic"].protocol
        scorer = Recording(False)
        score_dataset(cands, dataset="synthetic", run=ScoringRun(variant=v), protocol=p,
                      out_path=tmp_path / f"{run}.parquet", scorer=scorer)
        job = work[f"{run}/synthetic"]
        assert job["prompts"] == scorer.prompts and job["exact"] and "candidates.parquet" in job["source"]


def test_silver_and_reader_prompts_equal_their_layouts(tmp_path):
    p = Protocol.checked({"seed": 7, "M": 3, "B": 3, "max_doc_chars": 40, "perturbations": ["random_shuffle"]})
    cands = _candidates()
    (tmp_path / "tiny").mkdir()
    cands.write_parquet(tmp_path / "tiny" / "candidates.parquet")
    ds = Dataset.from_spec("tiny", {"task": "qa", "role": "eval", "candidates": {"format": "parquet"}}, p)
    size = dataset_size(ds, load_catalogue(), tmp_path)
    _, prompts = silver_prompts(cands, dataset="tiny", T=4, B=3, seed=7, max_doc_chars=40)
    assert silver_load(size, 4, p).prompts == len(prompts)
    for v, ensembles in ((_variant(), 1), (_variant(bsc_k=2, bsc_ensembles=2), 2)):
        out = tmp_path / f"scores-{v.bsc_k}.parquet"
        score_dataset(cands, dataset="tiny", run=ScoringRun(variant=v), protocol=p, out_path=out,
                      scorer=Recording(False))
        contexts = top_k_contexts(pl.read_parquet(out), 5, bsc_k=v.bsc_k, ensembles=ensembles)
        assert reader_load(size, v, p, 5).prompts == len(contexts)


def test_token_estimate_counts_the_cut_documents_template_and_skeleton(tmp_path):
    p = Protocol.checked({"seed": 7, "M": 1, "B": 3, "max_doc_chars": 40, "perturbations": []})
    cands = _candidates((3,))
    (tmp_path / "tiny").mkdir()
    cands.write_parquet(tmp_path / "tiny" / "candidates.parquet")
    ds = Dataset.from_spec("tiny", {"task": "rerank", "role": "eval", "candidates": {"format": "parquet"}}, p)
    base, _, _ = score_load(dataset_size(ds, load_catalogue(), tmp_path), _variant(), p, noise=False)
    from presdep.scoring.template import load_template

    t = load_template("relevance_v2")
    text = t.system + t.render(cands["query"][0], cands["doc"].to_list(), 40)  # the prompt's own characters
    assert base.prompts == 1 and base.tokens == pytest.approx(len(text) / 4 + 17 + 3 * 8)


def test_catalogue_sizes_price_a_dataset_without_its_file():
    cfg = load_config([REPO / "configs" / "paper.yaml"], base=REPO / "workflow_config.yaml")
    cat = load_catalogue()
    fiqa = dataset_size(cfg.datasets["fiqa"], cat, None)
    assert not fiqa.exact and fiqa.queries == 648 and "BEIR" in fiqa.source
    assert {s.shuffled: s.weight for s in fiqa.shapes} == {True: 100, False: 548}  # the fixed shuffle list
    assert dataset_size(cfg.datasets["msmarco-heldout"], cat, None).queries == 500
    assert dataset_size(cfg.datasets["msmarco-train"], cat, None).queries == 29_500
    off = _variant()
    base, _, rows = score_load(fiqa, off, cfg.datasets["fiqa"].protocol, noise=False)
    assert base.prompts == 100 * 11 * 5 + 548 * 5 and rows == (100 * 11 + 548) * 100


def test_flops_follow_the_formula_by_hand():
    L, P = 2000, 10
    per_prompt = 2 * N_QWEN * L + 2 * 36 * L**2 * 4096
    load = Load.of([(P, P * L)])
    shapes = {"qwen": (QWEN, "recorded")}.__getitem__
    readout = job_cost(Job("score", "j", "gpu", "qwen", (Part("readout", load, "slot"),), P), shapes, Rates())
    assert N_QWEN == 3_633_511_936 and readout.flops == pytest.approx(P * per_prompt)
    logprobs = job_cost(Job("score", "j", "gpu", "qwen", (Part("readout", load, "full_vocab"),), P), shapes, Rates())
    assert logprobs.flops == pytest.approx(P * per_prompt + P * L * 2 * 2560 * 151936)
    train = job_cost(Job("train_student", "j", "gpu", "qwen", (Part("train", load, checkpointing=True),), P),
                     shapes, Rates())
    assert train.flops == pytest.approx(4 * P * per_prompt)
    on_cpu = job_cost(Job("score", "j", "cpu", "qwen", (Part("readout", load),), P), shapes, Rates())
    assert on_cpu.flops == readout.flops and on_cpu.gpu_seconds == 0


def test_assumed_rates_are_the_peak_times_mfu_over_flops_per_token():
    rate, source = Rates().readout("grade_rows", QWEN, 2400)
    fpt = (2 * N_QWEN * 2400 + 2 * 36 * 2400**2 * 4096) / 2400 + 2 * 2560 * 4
    assert rate == pytest.approx(PEAK_BF16_FLOPS * READOUT_MFU / fpt) and source.startswith("grade-row pooling")
    assert "assumed" in source and "0.40" in source
    capped, why = Rates().readout("full_vocab", QWEN, 2400)
    assert capped == LOGPROBS_HOST_CAP and "host" in why


def test_rates_come_from_a_benchmark_json_and_fall_back_one_by_one(tmp_path):
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"rates": {"device": "NVIDIA H200", "readout_slot_tokens_per_s": 30000.0,
                                          "readout_full_vocab_tokens_per_s": 40000.0,
                                          "readout_grade_rows_tokens_per_s": None, "train_tokens_per_s": 9000.0,
                                          "matmul_bf16_flops_per_s": 7.0e14}}))
    rates = load_rates(path)
    rate, source = rates.readout("slot", QWEN, 2400)
    assert rate == 30000.0 and str(path) in source and "NVIDIA H200" in source
    assert rates.readout("full_vocab", QWEN, 2400)[0] == LOGPROBS_HOST_CAP  # the host caps it whatever the GPU
    pooled, why = rates.readout("grade_rows", QWEN, 2400)  # null: assumed, at the measured matmul rate
    assert pooled == pytest.approx(7.0e14 * READOUT_MFU / flops_per_token(QWEN, 2400, "grade_rows"))
    assert "assumed" in why and "measured on NVIDIA H200" in why
    assert rates.train(QWEN, 2400, True)[0] == 9000.0  # measured with checkpointing, as benchmarks/gpu.py runs it
    assert rates.train(QWEN, 2400, False)[0] == pytest.approx(12000.0)
    small = known_shape("Qwen/Qwen3-0.6B")  # another model: the measured rate moved by FLOPs per token
    moved, how = rates.readout("slot", small, 2400)
    assert moved == pytest.approx(30000.0 * flops_per_token(QWEN, 2400) / flops_per_token(small, 2400))
    assert "moved to this model" in how
    path.write_text(json.dumps({"rates": {"readout_slot_tokens_per_s": -1}}))
    with pytest.raises(ValueError, match="positive number"):
        load_rates(path)


def test_the_paper_bill_has_every_stage_and_prices_only_gpu_jobs():
    cfg = load_config([REPO / "configs" / "paper.yaml"], base=REPO / "workflow_config.yaml")
    b = plan_bill(cfg, Rates(), results=None, resources=None)
    stages = {s.name: s for s in b.stages}
    assert list(stages) == ["fetch", "silver", "train", "score", "reader", "tables"]
    for cpu in ("fetch", "tables"):
        assert stages[cpu].gpu_hours == 0 and stages[cpu].rate_source.startswith("CPU only")
    for gpu in ("silver", "train", "score", "reader"):
        assert stages[gpu].gpu_hours > 0 and stages[gpu].flops > 0 and stages[gpu].rate_tokens_per_s
    assert b.total.gpu_hours == pytest.approx(sum(s.gpu_hours for s in b.stages))
    assert not b.total.unknown, b.total.unknown
    # three pools x T = 10 teacher shuffles: MS MARCO 29,500 x 5 prompts, HotpotQA and UltraFeedback 30,000 x 1
    assert stages["silver"].prompts == 10 * (29_500 * 5 + 30_000 + 30_000)


def test_the_read_cache_reads_shared_presentations_once_and_the_readout_option_picks_the_rate(tmp_path):
    paper = [REPO / "configs" / "paper.yaml"]
    cfg = load_config(paper, base=REPO / "workflow_config.yaml")
    work = {w["job"]: w for w in plan_bill(cfg, Rates(), results=None, resources=None).work if w["rule"] == "score"}
    # DL19: 43 queries, all on its shuffle list, 5 prompts a presentation; BSC reads 1 + 40 of them,
    # off the shelf's 1 + 10 are among those
    assert work["bsc10/dl19"]["prompts_read"] == work["bsc10/dl19"]["prompts"] == 43 * 41 * 5
    assert work["off_the_shelf/dl19"]["prompts"] == 43 * 11 * 5 and work["off_the_shelf/dl19"]["prompts_read"] == 0
    assert work["round_robin/dl19"]["prompts_read"] == 43 * 11 * 5  # other chunks: other prompts
    logprobs = tmp_path / "logprobs.yaml"
    logprobs.write_text("models:\n  qwen3_4b: {readout: logprobs}\n")
    slow = plan_bill(load_config([*paper, logprobs], base=REPO / "workflow_config.yaml"), Rates(), results=None,
                     resources=None)
    fast = plan_bill(cfg, Rates(), results=None, resources=None)
    score = {b: next(s for s in x.stages if s.name == "score") for b, x in (("slow", slow), ("fast", fast))}
    assert "host logprobs" in score["slow"].rate_source and "pooling" in score["fast"].rate_source
    assert score["slow"].gpu_hours > 2 * score["fast"].gpu_hours


def test_only_the_scorer_that_rereads_in_batches_measures_the_noise_floor():
    from presdep.scoring.backends import IdentityScorer, TransformersScorer
    from presdep.scoring.vllm_backend import VLLMScorer

    assert NOISE_SCORERS == ("transformers",) and hasattr(TransformersScorer, "reread_in_batches")
    assert not hasattr(VLLMScorer, "reread_in_batches") and not hasattr(IdentityScorer, "reread_in_batches")


def test_the_command_prints_stages_rules_and_a_total(tmp_path):
    cmd = [str(PRESDEP), "plan", "--configfile", str(REPO / "configs" / "paper.yaml"), "--base",
           str(REPO / "workflow_config.yaml"), "--gpu-mem-gb", "80", "--results", str(tmp_path),
           "--resources", str(tmp_path)]
    out = subprocess.run([*cmd, "--json"], cwd=REPO, capture_output=True, text=True, check=False, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout)
    assert {"jobs", "stages", "rules", "total"} <= set(data)
    for stage in data["stages"]:
        assert {"stage", "prompts", "prompt_tokens", "flops", "gpu_hours", "rate_tokens_per_s", "rate_source",
                "exact", "source"} <= set(stage)
    assert {r["rule"] for r in data["rules"]} >= {"score", "train_student", "silver_labels", "read_answers"}
    text = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False, timeout=300).stdout
    assert "stage" in text and "\ntotal " in text and "assumed:" in text


def test_the_cluster_guide_bill_is_current():
    assert not plan_guide.stale(REPO), f"{plan_guide.CLUSTER_PAGE} is stale: run `{plan_guide.REGENERATE}`"
