"""The real ``silver_labels`` rule against the loopback fault server: a refused key fails
the job (non-zero exit, no output, the status and the count in its log, the key in
no file), and the corrected key re-runs it."""

from __future__ import annotations

import hashlib

from fault_server import FaultServer
from workflow_utils import scratch_workflow, silver_only_config, snakemake

from presdep.contracts.schemas import read_metadata, read_table

SECRET = "sk-presdep-wf-" + hashlib.sha256(b"workflow test key").hexdigest()[:24]
TARGET = "results/silver/gpt/synthetic_train.parquet"
LOG = "logs/silver_labels/gpt/synthetic_train.log"

CONFIG = silver_only_config(seed=13, entities=20, candidates=4, train=2, extra="""teachers:
  gpt: {kind: hosted, model: grader-1, base_url: "{url}", api_key_env: PRESDEP_WF_KEY, T: 2,
        max_retries: 1, base_delay_s: 0.001, timeout_s: 10}
""")


def test_a_refused_key_fails_the_rule_and_a_corrected_key_reruns_it(tmp_path, monkeypatch):
    work = scratch_workflow(tmp_path)
    with FaultServer(require_key=SECRET) as srv:
        # a trailing slash and "localhost": the endpoint is normalised, not taken verbatim
        (work / "hosted.yaml").write_text(CONFIG.replace("{url}", f"http://localhost:{srv.port}/v1/"))
        args = (TARGET, "--cores", "1", "--configfile", "hosted.yaml")
        monkeypatch.setenv("PRESDEP_WF_KEY", SECRET + "-typo")
        failed = snakemake(work, *args, check=False)
        assert failed.returncode != 0
        assert not (work / TARGET).exists()
        log = (work / LOG).read_text()
        # 2 queries x 4 candidates, B = 4 (rerank default of the embedded config), T = 2: 4 prompts
        assert "HTTP 401" in log and "4 of 4 prompts ended without a label" in log, log[-3000:]
        for text in (log, failed.stdout, failed.stderr):
            assert SECRET not in text  # neither the wrong key the server echoed nor any prefix of it
        refused = srv.requests

        monkeypatch.setenv("PRESDEP_WF_KEY", SECRET)
        snakemake(work, *args)
        assert (work / TARGET).exists() and srv.requests == refused + 4
        silver = read_table(work / TARGET, "silver")
        assert silver["score"].null_count() == 0 and silver.height == 2 * 4 * 2
        assert read_metadata(work / TARGET)["usage"]["prompts_failed"] == 0
        again = snakemake(work, "-n", *args)
        assert "Nothing to be done" in again.stdout + again.stderr
    for f in work.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f
