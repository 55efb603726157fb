"""Every command the documentation shows works as written.

Sources: each ```bash block of README.md and of the guide pages docs/guide/*.md, the
``#   snakemake ...`` lines of the Snakefile header and of the configs/examples/*.yaml headers. Each runs, as written, in a
scratch copy of the workflow (with ``.venv`` and the real data beside it), under these
rules, so that the whole file stays within a couple of minutes:

- a snakemake command that would run jobs runs as its dry run (``-n`` added);
  commands that compute nothing (``-n``, ``--rulegraph``, ``--summary``, ``--unlock``)
  run unchanged;
- ``--report`` needs a finished run: it runs in a copy where a tiny configuration has
  run to the end, with that configuration's ``--configfile`` added;
- ``make <target>`` runs as ``make -n <target>``;
- pytest commands run as ``--collect-only`` (running this file from itself would recurse);
- a ``| dot`` pipe runs whole where graphviz is installed; elsewhere its left side must
  print a dot graph;
- a command ending in ``&`` (a server) starts in the background, the commands after it
  are retried until it answers (at most 30 s), and it is stopped at the block's end;
- a file a user brings (``scores.parquet``, ``qrels.txt``) is stood in for by the tiny
  run's own files;
- commands that need a cluster or a site profile are in ALLOW_LIST, with the reason (and
  so are the lines that use a shell variable such a command sets); the test checks each
  entry still appears in its source, so the list cannot rot.

HOME is an empty folder for every command: afterwards it holds nothing presdep wrote.
The slow test kills a tiny real run with SIGKILL and checks that the README's resume
commands end with the same Table 1 as an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from workflow_utils import REPO, scratch_workflow

SHARED_DATA = REPO.parent / "shared" / "data"
BIN = Path(sys.executable).parent

# Commands that cannot run here, by the exact text that identifies them, with the reason.
ALLOW_LIST = {
    # a site profile is the user's own file (account, partition); <site> is a placeholder
    "--profile profiles/<site>": "needs a Slurm site profile with the user's account",
    # the Slurm executor plugin lives in .venv-slurm and the profile submits to sbatch;
    # tests/workflow/test_slurm.py runs this exact configuration on a local Slurm
    "--profile profiles/slurm --profile profiles/slurm-test": "needs a running Slurm cluster (tests/workflow/test_slurm.py)",
    # the preflight on the tiny config runs in tests/unit/preflight; the paper's needs its models fetched
    "presdep preflight --configfile configs/paper.yaml --local": "needs the paper's models fetched, on a GPU node",
    "--until fetch_dataset fetch_dataset_qa fetch_training_pool": "downloads the paper's collections and models",
}

# Files a documented command reads from the user's disk, stood in for by the tiny run's files.
STAND_INS = {
    "scores.parquet": "results/scores/bm25/tiny_test.parquet",
    "qrels.txt": "resources/datasets/tiny/test/qrels.txt",
}

# A tiny real configuration: one synthetic collection, the identity scorer, seconds per job.
TINY_EXTRA = "\nfigure1: {variant: bm25, dataset: tiny_test}\n"
NO_RUN_FLAGS = ("-n", "--dry-run", "--rulegraph", "--dag", "--summary", "--detailed-summary", "--unlock",
                "--report", "--lint", "--list-rules")


# ---------------------------------------------------------------- extraction


def readme_blocks(text: str) -> list[list[str]]:
    """The command lines of each ```bash block (comments and blank lines dropped, '\\' joined)."""
    blocks = re.findall(r"^```bash\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)
    return [_join(b.splitlines()) for b in blocks]


def header_commands(text: str) -> list[str]:
    """``#   snakemake ...`` lines at the top of a file, continuation lines joined."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        m = re.match(r"#\s+(snakemake\b.*)$", lines[i])
        if m:
            cmd = m.group(1)
            while cmd.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd.rstrip()[:-1].rstrip() + " " + lines[i].lstrip("#").strip()
            out.append(_strip_comment(cmd))
        i += 1
    return out


def _strip_comment(line: str) -> str:
    # an explanation after a command: "# ..." or a wide gap then "(...)"
    line = re.split(r"\s+#\s", line, maxsplit=1)[0]
    return re.split(r"\s{3,}\(", line, maxsplit=1)[0].strip()


def _join(lines: list[str]) -> list[str]:
    out, cur = [], ""
    for line in lines:
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        cur += line.rstrip()
        if cur.endswith("\\"):
            cur = cur[:-1] + " "
            continue
        out.append(cur.strip())
        cur = ""
    return out


GUIDE = REPO / "docs" / "guide"


def all_sources() -> list[tuple[str, list[str]]]:
    sources = [(f"README.md block {i + 1}", b) for i, b in enumerate(readme_blocks((REPO / "README.md").read_text()))]
    # the guide's pages are read by the same users and follow the same rules as the README
    for page in sorted(GUIDE.glob("*.md")):
        sources += [(f"docs/guide/{page.name} block {i + 1}", b) for i, b in enumerate(readme_blocks(page.read_text()))]
    sources.append(("Snakefile header", header_commands((REPO / "Snakefile").read_text())))
    for cfg in sorted((REPO / "configs" / "examples").glob("*.yaml")):
        sources.append((f"configs/examples/{cfg.name} header", header_commands(cfg.read_text())))
    return [(name, cmds) for name, cmds in sources if cmds]


# ---------------------------------------------------------------- rewriting


def allowed(cmd: str) -> str | None:
    return next((why for key, why in ALLOW_LIST.items() if key in cmd), None)


def is_snakemake_run(cmd: str) -> bool:
    try:
        words = shlex.split(cmd, comments=True)
    except ValueError:  # not one command a shell would accept; the block run will say so
        return False
    for stop in ("|", ">", "&&", ";", "&"):
        words = words[: words.index(stop)] if stop in words else words
    return bool(words) and words[0] == "snakemake" and not any(w in NO_RUN_FLAGS for w in words)


def rewrite(cmd: str, tiny_config: str) -> str:
    """The form of a documented command that this test runs (see the module docstring)."""
    if is_snakemake_run(cmd):
        return cmd.replace("snakemake", "snakemake -n", 1)
    if re.match(r"snakemake\b.*--report\b", cmd):
        return f"{_strip_comment(cmd)} --configfile {tiny_config}"
    if re.match(r"make\s", cmd):
        return cmd.replace("make", "make -n", 1)
    if re.search(r"-m pytest\b", cmd):
        return f"{_strip_comment(cmd)} --collect-only"
    if re.search(r"\|\s*dot\b", cmd) and shutil.which("dot") is None:
        left = cmd.split("|")[0].strip()
        return f"{left} > rulegraph.dot && head -1 rulegraph.dot | grep -q '^digraph'"
    return cmd


def script_for(cmds: list[str], tiny_config: str) -> str:
    """One bash script per block: activation and cwd carry over from line to line, as for a reader."""
    lines = ["set -euo pipefail",
             "_retry() { for _ in $(seq 150); do \"$@\" && return 0; sleep 0.2; done; return 1; }"]
    background = False
    skipped_vars: dict[str, str] = {}  # shell variables set by an allow-listed line
    for cmd in cmds:
        why = allowed(cmd) or next((w for v, w in skipped_vars.items() if re.search(rf"\${{?{v}\b", cmd)), None)
        if why:
            assigned = re.match(r"([A-Za-z_]\w*)=", cmd)
            if assigned:
                skipped_vars[assigned.group(1)] = why
            lines.append(f"# allow-listed ({why}): {cmd}")
            continue
        run = rewrite(cmd, tiny_config)
        if run.rstrip().endswith("&"):
            lines.append(f"{run.rstrip()} _bg=$!; trap 'kill $_bg 2>/dev/null' EXIT")
            background = True
            continue
        lines.append(f"echo '+ {run.replace(chr(39), chr(39) + chr(92) + chr(39) + chr(39))}'")
        lines.append(f"_retry {run}" if background and not _has_shell_syntax(run) else run)
    return "\n".join(lines) + "\n"


def _has_shell_syntax(cmd: str) -> bool:
    return any(tok in cmd for tok in ("|", ">", "<", "&&", ";"))


# ---------------------------------------------------------------- fixtures


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "VIRTUAL_ENV")}
    env["HOME"] = str(home)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def _workflow(root: Path) -> Path:
    work = scratch_workflow(root, SHARED_DATA if SHARED_DATA.is_dir() else None)
    for name in ("Makefile", "pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, work / name)
    (work / ".venv").symlink_to(REPO / ".venv")
    (work / "tests").symlink_to(REPO / "tests")
    tiny = (REPO / "configs" / "examples" / "slurm-tiny.yaml").read_text() + TINY_EXTRA
    (work / "tiny.yaml").write_text(tiny)
    return work


def _run_tiny(work: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    # the default target, as `make run`: every final output (rules/common.smk, final_outputs)
    cmd = [str(BIN / "snakemake"), "--cores", "2", "--configfile", "tiny.yaml", *extra]
    return subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, check=False, timeout=600)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def finished(tmp_path_factory, home) -> Path:
    """A scratch workflow in which the tiny configuration ran to the end (Table 1 and Figure 1)."""
    work = _workflow(tmp_path_factory.mktemp("finished"))
    proc = _run_tiny(work, _env(home))
    assert proc.returncode == 0, proc.stderr[-6000:]
    for name, src in STAND_INS.items():
        shutil.copy2(work / src, work / name)
    return work


# ---------------------------------------------------------------- tests


def test_every_source_has_commands_and_the_extraction_sees_them():
    names = [n for n, _ in all_sources()]
    assert any(n.startswith("README.md") for n in names)
    assert "Snakefile header" in names
    # every guide page that shows a bash block is a source (the cluster guide's inspect block among them)
    with_blocks = {p.name for p in GUIDE.glob("*.md") if re.search(r"^```bash$", p.read_text(), flags=re.MULTILINE)}
    assert with_blocks and with_blocks <= {n.split()[0].removeprefix("docs/guide/") for n in names}
    assert any("--profile profiles/<site>" in c for n, cmds in all_sources() if n.startswith("docs/guide/cluster.md")
               for c in cmds)
    readme = dict(all_sources())["README.md block 1"]
    assert readme[0].startswith("make run") and readme[1].startswith("make test")
    # a continued header line is one command
    slurm = dict(all_sources())["configs/examples/slurm-tiny.yaml header"]
    assert slurm == [("snakemake --profile profiles/slurm --profile profiles/slurm-test "
                      "--configfile configs/examples/slurm-tiny.yaml -- results/table1.csv")]


def test_allow_list_entries_still_appear_in_the_docs():
    docs = [c for _, cmds in all_sources() for c in cmds]
    for key, why in ALLOW_LIST.items():
        assert any(key in c for c in docs), f"allow-list entry {key!r} ({why}) no longer appears; remove it"


def test_lines_using_an_allow_listed_variable_are_skipped_too():
    script = script_for(['S="snakemake --profile profiles/<site>"', "$S -n -- results/table1.csv",
                         "snakemake --unlock"], "t.yaml")
    runs = [l for l in script.splitlines() if not l.startswith(("#", "echo", "set ", "_retry()"))]
    assert runs == ["snakemake --unlock"]


def test_rewrite_rules():
    assert rewrite("snakemake --cores all results/table1.csv", "t.yaml") == "snakemake -n --cores all results/table1.csv"
    assert rewrite("snakemake -n results/table1.csv", "t.yaml") == "snakemake -n results/table1.csv"
    assert rewrite("snakemake --unlock", "t.yaml") == "snakemake --unlock"
    assert rewrite("make run    # set-up", "t.yaml") == "make -n run    # set-up"
    assert rewrite("snakemake a --report r.html   # x", "t.yaml") == "snakemake a --report r.html --configfile t.yaml"


def _params() -> list:
    """One case per source; the paper-scale dry runs (tens of seconds each) are marked slow."""
    return [pytest.param(n, marks=pytest.mark.slow) if any("configs/paper.yaml" in c for c in cmds) else n
            for n, cmds in all_sources()]


_SEEN: set[str] = set()  # snakemake dry runs already checked by an earlier source


@pytest.mark.parametrize("source", _params())
def test_documented_commands_work(source, finished, home):
    cmds = dict(all_sources())[source]
    # the same dry run shown in several places (README, Snakefile, a config header) runs once
    repeated = {c for c in cmds if is_snakemake_run(c) and _strip_comment(c) in _SEEN}
    _SEEN.update(_strip_comment(c) for c in cmds if is_snakemake_run(c))
    if repeated and len(repeated) == len(cmds):
        pytest.skip(f"{source}: its commands were checked under another source: {sorted(repeated)}")
    cmds = [c for c in cmds if c not in repeated]
    if all(allowed(c) for c in cmds):
        pytest.skip(f"{source}: every command is allow-listed ({'; '.join(sorted({allowed(c) for c in cmds}))})")
    if SHARED_DATA.is_dir() is False and any("configs/" in c and "slurm-tiny" not in c for c in cmds):
        pytest.skip(f"real test collections not found at {SHARED_DATA}")
    script = script_for(cmds, "tiny.yaml")
    proc = subprocess.run(["bash", "-c", script], cwd=finished, env=_env(home), capture_output=True, text=True,
                          check=False, timeout=600)
    assert proc.returncode == 0, f"{source}:\n{script}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}"
    # nothing of presdep's in the (empty) home: Snakemake's own source cache is the only visitor
    visitors = {p.relative_to(home).parts[:2] for p in home.rglob("*")}
    assert visitors <= {(".cache",), (".cache", "snakemake")}, sorted(visitors)


# What the report must carry after a finished run: Snakemake category -> files from the run.
REPORT_ENTRIES = {
    "Table 1": ["results/table1.md"],
    "Figure 1": ["results/figure1.svg"],
    "Position profile": ["results/position_profile.svg"],
}
STABILITY_SVG = re.compile(r"results/stability/svg/[a-z0-9_]+\.svg")


def report_contents(html: str, var: str) -> dict:
    """One of the JSON objects Snakemake's HTML report embeds (``var categories = {...};``)."""
    m = re.search(rf"var {var} = (\{{.*?\}});\s*</script>", html, flags=re.DOTALL)
    assert m is not None, f"the report embeds no {var!r} object"
    return json.loads(m.group(1))


def test_report_command_after_a_run(finished, home):
    """The README's report command works after a run and carries Table 1, Figure 1, the position
    profile and the stability figures, each under its category with a caption."""
    readme = [c for n, b in all_sources() if n.startswith("README.md") for c in b if "--report" in c]
    assert readme, "the README shows no report command"
    for cmd in [c for _, b in all_sources() for c in b if "--report" in c]:
        words = shlex.split(_strip_comment(cmd))
        report = words[words.index("--report") + 1]
        assert report.endswith(".html"), f"--report takes the report's path first: {cmd}"
        report = finished / report
        report.unlink(missing_ok=True)
        proc = subprocess.run(["bash", "-c", rewrite(cmd, "tiny.yaml")], cwd=finished, env=_env(home),
                              capture_output=True, text=True, check=False, timeout=600)
        assert proc.returncode == 0, proc.stderr[-4000:]
        html = report.read_text(errors="replace")
        categories = {cat: [f for files in subs.values() for f in files]
                      for cat, subs in report_contents(html, "categories").items()}
        for cat, files in REPORT_ENTRIES.items():
            assert categories.get(cat) == files, f"{cat}: {categories.get(cat)} in {cmd}"
        stability = categories.get("Stability", [])
        assert stability and all(STABILITY_SVG.fullmatch(f) for f in stability), stability
        assert sorted(Path(f).stem for f in stability) == sorted(
            p.stem for p in (finished / "results" / "stability" / "svg").glob("*.svg"))  # every column's figure
        results = report_contents(html, "results")
        for f in [*stability, *(f for files in REPORT_ENTRIES.values() for f in files)]:
            assert results[f]["caption"].startswith("<p>"), f"{f} has no caption"
        column = Path(stability[0]).stem
        assert f"Table 1 column {column}" in results[stability[0]]["caption"]  # the caption names its column


@pytest.mark.slow
def test_resume_after_kill_gives_the_same_table(tmp_path, finished, home):
    """SIGKILL a tiny real run mid-way; the README's resume commands finish it identically."""
    block = next(b for b in readme_blocks((REPO / "README.md").read_text()) if any(c.startswith("snakemake --unlock") for c in b))
    unlock = [c for c in block if c.startswith("snakemake --unlock")]
    rerun = [c for c in block if is_snakemake_run(c)]
    assert len(unlock) == 1 and len(rerun) == 1, block
    env = _env(home)
    work = _workflow(tmp_path)
    run_cmd = f"{_strip_comment(rerun[0])} --configfile tiny.yaml"
    proc = subprocess.Popen(["bash", "-c", run_cmd.replace("snakemake", "exec snakemake", 1)], cwd=work, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    mid = work / "results" / "tiny_test" / "candidates.parquet"
    deadline = time.time() + 300
    while time.time() < deadline and not mid.exists() and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the run and its jobs, as kill -9 of a terminal's process group
    proc.wait()
    assert mid.exists() and not (work / "results" / "table1.csv").exists(), "the kill did not land mid-run"
    done = sorted(str(p.relative_to(work)) for p in (work / "results").rglob("*.parquet"))
    print(f"killed with SIGKILL after {len(done)} result files: {done}")
    # the failure a user sees without the resume commands
    again = subprocess.run(["bash", "-c", run_cmd], cwd=work, env=env, capture_output=True, text=True, check=False, timeout=600)
    assert again.returncode != 0 and "LockException" in again.stdout + again.stderr
    print("plain re-run:", next(l for l in (again.stdout + again.stderr).splitlines() if "LockException" in l))
    for cmd in (_strip_comment(unlock[0]), run_cmd):
        res = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, capture_output=True, text=True, check=False, timeout=600)
        assert res.returncode == 0, f"{cmd}:\n{res.stderr[-6000:]}"
    for name in ("table1.csv", "table1_counts.csv", "table1.md", "bsc_curve.csv"):
        assert (work / "results" / name).read_bytes() == (finished / "results" / name).read_bytes(), name
    print(f"resumed with {unlock[0]!r} then {run_cmd!r}: table1.csv, table1_counts.csv, table1.md, "
          "bsc_curve.csv byte-identical to the uninterrupted run")


def test_every_help_text_works():
    """`presdep --help` and every sub-command's --help exit 0 (they are shown to users as they are)."""
    from presdep.cli import build_parser

    parser = build_parser()
    subs = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    names = sorted(subs.choices)
    assert {"metrics", "stability", "synthetic", "bench"} <= set(names)
    for argv in [["--help"]] + [[n, "--help"] for n in names]:
        proc = subprocess.run([str(BIN / "presdep"), *argv], capture_output=True, text=True, check=False, timeout=120)
        assert proc.returncode == 0 and "usage: presdep" in proc.stdout, (argv, proc.stderr[-2000:])


def test_docs_pages_exist_and_the_code_cites_them():
    """docs/methods/ documents every Table 1 column; the code cites docs/ pages that exist, never METHODS.md."""
    from presdep.report.tables import ALL_COLUMNS

    docs = REPO / "docs"
    columns = (docs / "methods" / "table1.md").read_text()
    for column in ALL_COLUMNS:
        assert f"`{column}`" in columns, f"docs/methods/table1.md does not list the Table 1 column {column}"
    # (every relative link of README.md and docs/ is checked by tests/unit/report/test_guide.py)
    cited, stale, missing = set(), [], []
    for folder in ("presdep", "rules", "scripts"):
        for path in (REPO / folder).rglob("*"):
            if path.suffix not in (".py", ".yaml", ".smk", ".rst") or "__pycache__" in path.parts:
                continue
            text = path.read_text(errors="replace")
            for page in re.findall(r"docs/((?:[\w-]+/)*[\w.-]+\.md)", text):
                cited.add(page)
                if not (docs / page).is_file():
                    missing.append(f"{path.relative_to(REPO)}: docs/{page}")
            if "METHODS" in text:
                stale.append(str(path.relative_to(REPO)))
    assert not stale, f"these files still cite METHODS.md, which the repository does not have: {stale}"
    assert cited, "no docstring cites a docs/ page"
    assert not missing, f"cited docs pages that do not exist (the methods pages live in docs/methods/): {sorted(missing)}"


def test_make_resume_unlocks_then_runs_what_make_run_runs(finished, home):
    """`make resume` (README, Two commands) = snakemake --unlock, then exactly `make run`'s command."""
    def planned(target: str) -> list[str]:
        proc = subprocess.run(["make", "-n", "-o", ".venv/.presdep-installed", target], cwd=finished,
                              env=_env(home), capture_output=True, text=True, check=False, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return [l for l in proc.stdout.splitlines() if "snakemake" in l]

    run, resume = planned("run"), planned("resume")
    assert len(run) == 1 and "--cores" in run[0]
    assert "snakemake --unlock" in resume[0] and resume[1:] == run


def test_clean_results_keeps_only_the_readme(tmp_path):
    """`make clean-results` (docs/guide/outputs.md) empties results/ but keeps its tracked README."""
    shutil.copy2(REPO / "Makefile", tmp_path / "Makefile")
    res = tmp_path / "results"
    for rel in ("README.md", "table1.csv", "report.html", "dag.mmd", "scores/v/d.parquet", "stability/t.json"):
        (res / rel).parent.mkdir(parents=True, exist_ok=True)
        (res / rel).write_text("x")
    (tmp_path / ".snakemake" / "incomplete").mkdir(parents=True)
    proc = subprocess.run(["make", "-s", "clean-results"], cwd=tmp_path, capture_output=True, text=True,
                          check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in res.iterdir()) == ["README.md"]
    assert not (tmp_path / ".snakemake" / "incomplete").exists()
