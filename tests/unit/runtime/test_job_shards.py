"""The content caches' layout after a run: one job shard per job, holding every entry the job used,
so the files left depend on which entries each job needs, never on which job computed a shared
entry first, how many jobs ran at once, or whether a job was killed and resumed."""

from __future__ import annotations

import itertools
from pathlib import Path

from presdep.runtime.shard_store import PART_PREFIX, shard_name
from presdep.scoring.answer_cache import AnswerCache

IDENT = {"reader": "toy", "dtype": "float32"}
# Three jobs' inputs: A and B share s1, s2; B and C share s3; each has inputs of its own.
NEEDS = {"A": ["a1", "s1", "s2", "a2"], "B": ["s2", "b1", "s3", "s1"], "C": ["s3", "c1"]}


def answer(key: str) -> str:
    return f"answer to {key}"


def use(cache: AnswerCache, keys: list[str]) -> None:
    """What a job does with its inputs: take stored answers, compute (and flush) the others."""
    found = cache.lookup(keys)
    for k in keys:
        if k not in found:
            cache.put(k, answer(k))
    cache.flush()


def layout(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.parquet"))}


def serial(root: Path, order: str) -> dict[str, bytes]:
    for job in order:
        cache = AnswerCache(root, IDENT)
        use(cache, NEEDS[job])
        cache.write_job_shard()
    return layout(root)


def test_the_files_left_do_not_depend_on_the_order_jobs_ran_in(tmp_path):
    orders = ["".join(order) for order in itertools.permutations("ABC")]
    runs = {order: serial(tmp_path / order, order) for order in orders}
    first = runs["ABC"]
    assert all(files == first for files in runs.values())
    # One shard per job, named by the keys it used, holding each of them (shared ones twice).
    key = AnswerCache(tmp_path / "probe", IDENT).key
    assert sorted(first) == sorted(f"{key}/{shard_name(key, keys)}" for keys in NEEDS.values())
    fresh = AnswerCache(tmp_path / "ABC", IDENT)
    assert fresh.lookup([k for keys in NEEDS.values() for k in keys]) == {
        k: answer(k) for keys in NEEDS.values() for k in keys}


def test_jobs_running_at_once_leave_what_a_serial_run_leaves(tmp_path):
    """A, B and C interleaved: A's part gives B its s1 and s2 while both run, and whichever job
    ends last finds the others' parts covered or already gone."""
    want = serial(tmp_path / "serial", "ABC")
    root = tmp_path / "interleaved"
    a, b, c = (AnswerCache(root, IDENT) for _ in range(3))
    use(a, NEEDS["A"][:3])  # a1, s1, s2 flushed as a part
    use(b, NEEDS["B"])  # s1, s2 found in A's part; b1, s3 computed
    use(c, NEEDS["C"])  # s3 found in B's part
    assert any(Path(name).name.startswith(PART_PREFIX) for name in layout(root)) and b.misses == 2 and c.misses == 1
    c.write_job_shard()  # B's part is not covered by C's entries: it stays until B ends
    use(a, NEEDS["A"][3:])
    b.write_job_shard()
    a.write_job_shard()
    assert layout(root) == want


def test_a_killed_job_resumed_from_its_journal_leaves_the_uninterrupted_shard(tmp_path):
    """The job records the keys behind each finished unit of work before the unit counts as
    done; the resumed job skips that work yet its shard holds those entries, and the killed
    run's part goes."""
    want = serial(tmp_path / "whole", "A")
    root, journal = tmp_path / "killed", tmp_path / "killed-job.partial"
    journal.mkdir()
    first = AnswerCache(root, IDENT)
    first.keep_journal(journal)
    use(first, NEEDS["A"][:2])  # the first unit of work: a1, s1
    first.checkpoint()
    del first  # killed: no job shard; its part and journal stay
    assert [n for n in layout(root) if Path(n).name.startswith(PART_PREFIX)] and list(journal.iterdir())
    again = AnswerCache(root, IDENT)
    assert again.keep_journal(journal) == 2
    use(again, NEEDS["A"][2:])  # only the unfinished unit: s2, a2
    again.write_job_shard()
    assert layout(root) == want


def test_a_job_shard_another_run_wrote_is_kept_as_it_is(tmp_path):
    want = serial(tmp_path, "A")
    shard = tmp_path / next(iter(want))
    before = shard.stat().st_mtime_ns
    again = AnswerCache(tmp_path, IDENT)
    use(again, NEEDS["A"])  # every answer found
    assert again.write_job_shard() == shard and again.misses == 0
    assert shard.stat().st_mtime_ns == before and layout(tmp_path) == want
