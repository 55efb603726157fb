"""Every file a dataset names is an input of the rules that read it: an edit re-runs what
depends on it (and nothing else), and a job's input error is one line naming the config key."""

import os
import re
import time

import pytest
from workflow_utils import planned_jobs, scratch_workflow, snakemake

CONFIG = """\
name: own
protocol: {M: 2, B: {rerank: 4}}
synthetic: {}
synthetic_tasks: {}
datasets:
  mine:
    task: rerank
    candidates:
      format: trec_run
      run: own/run.txt
      corpus: {format: jsonl, path: own/corpus.jsonl}
      topics: {format: tsv, path: own/topics.tsv}
    qrels: {format: trec, path: own/qrels.txt}
    shuffle_queries: {path: own/shuffled.txt}
  other:
    task: rerank
    candidates:
      format: trec_run
      run: own/run.txt
      corpus: {format: jsonl, path: own/corpus.jsonl}
      topics: {format: tsv, path: own/topics.tsv}
    qrels: {format: trec, path: own/qrels_other.txt}
  bm25ds:
    task: rerank
    candidates:
      format: bm25
      corpus: {format: beir, path: own/beir}
      topics: {format: beir, path: own/beir}
    qrels: {format: beir, path: own/beir}
variants:
  bm25: {label: First stage, scorer: identity}
"""

FIXTURES = ["results/own/mine/candidates.parquet", "results/own/other/candidates.parquet"]


def _write_files(work):
    own = work / "own"
    (own / "beir" / "qrels").mkdir(parents=True)
    docs = [f"d{i}" for i in range(6)]
    (own / "corpus.jsonl").write_text("".join(f'{{"id": "{d}", "contents": "passage {d} about topic"}}\n' for d in docs))
    (own / "topics.tsv").write_text("q1\tfirst question\nq2\tsecond question\n")
    (own / "run.txt").write_text("".join(f"{q} Q0 {d} {r + 1} {10 - r} bm25\n" for q in ("q1", "q2")
                                         for r, d in enumerate(docs)))
    (own / "qrels.txt").write_text("q1 0 d1 2\nq1 0 d4 1\nq2 0 d2 3\n")
    (own / "qrels_other.txt").write_text("q1 0 d0 1\nq2 0 d5 2\n")
    (own / "shuffled.txt").write_text("q1\nq2\n")
    beir = own / "beir"
    (beir / "corpus.jsonl").write_text("".join(f'{{"_id": "{d}", "title": "", "text": "text {d}"}}\n' for d in docs))
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "first"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")


@pytest.fixture(scope="module")
def own_workflow(tmp_path_factory):
    work = scratch_workflow(tmp_path_factory.mktemp("inputs"))
    _write_files(work)
    (work / "own.yaml").write_text(CONFIG)
    snakemake(work, *FIXTURES, "--cores", "2", "--configfile", "own.yaml")
    return work


def _dry(work, *targets):
    out = snakemake(work, *targets, "-n", "--cores", "1", "--configfile", "own.yaml")
    return out.stdout + out.stderr


# One edit per file, as a user makes it: a passage, a topic, a score, a grade, a list entry.
EDITS = {
    "run.txt": ("q2 Q0 d5 6 5 bm25", "q2 Q0 d5 6 4.5 bm25"),
    "corpus.jsonl": ("passage d3 about topic", "passage d3 about another topic"),
    "topics.tsv": ("second question", "second question, edited"),
    "qrels.txt": ("q1 0 d4 1", "q1 0 d4 2"),
    "shuffled.txt": ("q1\nq2\n", "q2\nq1\n"),
}


def _edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    later = time.time() + 2  # newer than the outputs even on a coarse clock
    os.utime(path, (later, later))


@pytest.mark.parametrize("name", list(EDITS))
def test_an_edited_dataset_file_reruns_its_fixture_and_nothing_else(own_workflow, name):
    assert "Nothing to be done" in _dry(own_workflow, *FIXTURES)
    path = own_workflow / "own" / name
    _edit(path, *EDITS[name])
    text = _dry(own_workflow, *FIXTURES)
    jobs = planned_jobs(text)
    shared = name in ("run.txt", "corpus.jsonl", "topics.tsv")  # both datasets read these
    assert jobs == {"build_fixture": 2 if shared else 1}, text
    assert re.search(rf"Updated input files: .*own/{re.escape(name)}", text), text
    # Run it, so the next case starts from an up-to-date workflow.
    snakemake(own_workflow, *FIXTURES, "--cores", "2", "--configfile", "own.yaml")


def test_a_beir_folder_counts_as_the_files_read_inside_it(own_workflow):
    text = _dry(own_workflow, "results/own/bm25ds/candidates.parquet")
    build_index = text[text.index("rule build_index:"):].split("\n\n")[0]
    assert "own/beir/corpus.jsonl" in build_index
    retrieve = text[text.index("rule retrieve:"):].split("\n\n")[0]
    assert "own/beir/queries.jsonl" in retrieve and "own/beir/qrels/test.tsv" in retrieve
    fixture = text[text.index("rule build_fixture:"):].split("\n\n")[0]
    assert "own/beir/corpus.jsonl" in fixture and "own/beir/qrels/test.tsv" in fixture


def test_a_job_input_error_is_one_line_naming_the_config_key(own_workflow, tmp_path):
    work = own_workflow
    bad = CONFIG.replace("name: own", "name: own_bad").replace(
        "    candidates:\n      format: trec_run\n      run: own/run.txt\n      corpus: {format: jsonl, path: own/corpus.jsonl}\n"
        "      topics: {format: tsv, path: own/topics.tsv}\n    qrels: {format: trec, path: own/qrels.txt}",
        "    candidates: {format: rank_llm_json, path: own/run.txt}\n    qrels: {format: trec, path: own/qrels.txt}", 1)
    (work / "own_bad.yaml").write_text(bad)
    out = snakemake(work, "results/own_bad/mine/candidates.parquet", "--cores", "1", "--configfile", "own_bad.yaml",
                    check=False)
    text = out.stdout + out.stderr
    assert out.returncode != 0
    line = next(ln for ln in text.splitlines() if ln.startswith("presdep: input error: "))
    assert "datasets.mine.candidates.path" in line and "own/run.txt" in line and "trec_run" in line, line
    assert "Traceback" not in text


def test_a_missing_user_file_is_named_by_its_config_key_when_a_job_needs_it(own_workflow):
    work = own_workflow
    (work / "own_missing.yaml").write_text(CONFIG.replace("name: own", "name: own_missing").replace(
        "topics: {format: tsv, path: own/topics.tsv}\n    qrels: {format: trec, path: own/qrels.txt}",
        "topics: {format: tsv, path: own/nope.tsv}\n    qrels: {format: trec, path: own/qrels.txt}", 1))
    out = snakemake(work, "results/own_missing/mine/candidates.parquet", "-n", "--cores", "1", "--configfile",
                    "own_missing.yaml", check=False)
    assert out.returncode != 0
    assert "datasets.mine.candidates.topics.path: own/nope.tsv does not exist" in out.stdout + out.stderr
    # Another dataset of the same config, whose files are all there, still plans.
    ok = snakemake(work, "results/own_missing/other/candidates.parquet", "-n", "--cores", "1", "--configfile",
                   "own_missing.yaml")
    assert planned_jobs(ok.stdout + ok.stderr) == {"build_fixture": 1}


def test_the_rebuild_hint_for_a_damaged_results_file_works_as_written(own_workflow):
    from presdep.contracts.errors import SchemaError
    from presdep.contracts.schemas import REBUILD_HINT, read_table

    work = own_workflow
    target = work / FIXTURES[0]
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(SchemaError) as err:
        read_table(target, "candidates")
    assert REBUILD_HINT in str(err.value) and "--force <this file>" in REBUILD_HINT
    # What the hint says, word for word (a plain `snakemake` would call the file up to date).
    assert "Nothing to be done" in _dry(work, FIXTURES[0])
    snakemake(work, "--cores", "all", "--force", FIXTURES[0], "--configfile", "own.yaml")
    assert read_table(target, "candidates").height == 12
