"""Resolve presdep's environments with pip's own resolver, and keep their lock files.

One file holds the versions: ``envs/constraints.txt``. The ``pip:`` block of every
``envs/*.yaml`` repeats its pins (``--sync`` writes them from it), and each env file has a lock,
``envs/locks/<env>.txt``: every package pip resolves for that block under the constraints, which
the env's post-deploy script installs (``install-presdep.sh``), so each deployment gets the same
stack. Targets resolved, for Linux x86_64 and Python 3.11 from wheels alone:

- each ``envs/*.yaml`` pip block, under ``envs/constraints.txt`` and its lock;
- ``make env``: ``TORCH_SPEC`` and the package with the Makefile's extras, under the constraints;
- ``make TORCH_SPEC=torch env`` plus the ``gpu`` extra, under the constraints and the gpu lock;
- ``make cluster-env``: ``make env`` plus the ``slurm`` extra (``cluster/slurm-venv.sh``);
- the conda path's driver env: Snakemake and the Slurm plugin, under the constraints.

    python envs/resolve.py                # resolve every target; exit 1 naming each that fails
    python envs/resolve.py --lock         # resolve afresh, write the locks and their digests
    python envs/resolve.py --sync         # offline: env file pins := constraints.txt pins
    python envs/resolve.py --check        # offline: pins, locks, digests and TORCH_SPEC agree
    python envs/resolve.py --pip-block envs/gpu.yaml   # the block's requirements (post-deploy)

pip runs isolated from this machine's pip configuration (a find-links folder with a CPU torch,
a site constraint file) against ``$PRESDEP_INDEX_URL`` (default PyPI), so the answer is the
registry's. Needs pip >= 23 in the Python that runs it (``--report``); PyYAML for env files.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Self


def _sibling(name: str):
    """A module beside this file, whether this runs as a script or is imported by path (the tests)."""
    spec = importlib.util.spec_from_file_location(f"presdep_envs_{name}", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # before exec: its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


index_proxy = _sibling("index_proxy")

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "envs" / "constraints.txt"
PYTHON = "3.11"
INDEX_URL = os.environ.get("PRESDEP_INDEX_URL", "https://pypi.org/simple/")
# The oldest glibc a node is assumed to have (RHEL 8's 2.28) ...
GLIBC = 28
# ... except where vLLM is installed: vLLM >= 0.32 needs llguidance 1.7, whose x86_64 wheels
# are manylinux_2_31 (older glibc would build it from its Rust sources).
GPU_GLIBC = 31
# Published as source only: a metadata-only wheel stands in for each (index_proxy.StandIns). Listed ones
# get theirs before pip runs; any other pip finds no distribution of gets one, and pip a second try.
SDIST_ONLY = ("pyserini", "connection-pool")
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;#]+)$")
# The pin lines of an env file's pip block, as written (`      - name==version  # note`).
PIN_LINE = re.compile(r"^(\s*-\s*)([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s#]+)(.*)$")
DIGEST_LINE = re.compile(r"^# lock sha256: \S*$", re.MULTILINE)
DIGEST_NOTE = ("# The post-deploy script installs envs/locks/{stem}.txt; this digest of it rebuilds the env "
               "when it changes:")
# pip's words for "the index could not be reached" (urllib3, socket and proxy errors).
UNREACHABLE = re.compile(
    r"NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution|"
    r"Name or service not known|Network is unreachable|ConnectTimeoutError|ProxyError|Connection refused|"
    r"No route to host|ReadTimeoutError"
)


norm = index_proxy.norm  # PEP 503 names: what pip compares


def read_pins(path: Path) -> dict[str, str]:
    """``name -> version`` of a constraints or lock file (``name==version`` lines)."""
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = PIN.match(line.split("#", 1)[0].strip())
        if m:
            pins[norm(m.group(1))] = m.group(3)
    return pins


def pip_block(path: Path) -> list[str]:
    """The requirement lines of an env file's ``pip:`` block."""
    import yaml  # only env files need it: the post-deploy scripts and the checks

    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    for dep in data.get("dependencies") or []:
        if isinstance(dep, dict) and "pip" in dep:
            return [str(r).strip() for r in dep["pip"] if not str(r).strip().startswith("-")]
    return []


def block_pins(reqs: list[str]) -> dict[str, str]:
    return {norm(m.group(1)): m.group(3) for m in map(PIN.match, reqs) if m}


def makefile_value(name: str, root: Path = ROOT) -> str:
    m = re.search(rf"^{name} \?= *(.+)$", (root / "Makefile").read_text(encoding="utf-8"), re.MULTILINE)
    if not m:
        raise ValueError(f"Makefile: no '{name} ?=' line")
    return m.group(1).strip().strip("\"'")


def venv_extras(root: Path = ROOT) -> list[str]:
    """The extras `make env` installs (its `-e ".[...]"`)."""
    m = re.search(r'-e "\.\[([^\]]+)\]"', (root / "Makefile").read_text(encoding="utf-8"))
    if not m:
        raise ValueError("Makefile: no pip install -e \".[extras]\" line")
    return m.group(1).split(",")


def project_requirements(extras: list[str], root: Path = ROOT, base: bool = True) -> list[str]:
    """presdep's own requirements (`base`) with these extras: the package itself is no wheel on the index."""
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = list(project["dependencies"]) if base else []
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    return reqs


@dataclass(frozen=True)
class Target:
    """One thing to resolve: an env file or an install path."""

    name: str
    requirements: tuple[str, ...]
    constraints: tuple[Path, ...]
    glibc: int = GLIBC
    lock: Path | None = None  # where --lock writes what it resolves

    def where(self) -> str:
        return f"Linux x86_64 (glibc >= 2.{self.glibc}), Python {PYTHON}"


def env_files(root: Path = ROOT) -> list[Path]:
    return sorted((root / "envs").glob("*.yaml"))


def targets(root: Path = ROOT, locked: bool = True, envs: list[Path] | None = None) -> list[Target]:
    """The env files (each under the constraints and, when `locked`, its lock), then the install paths."""
    constraints = root / "envs" / "constraints.txt"
    out = []
    for path in env_files(root) if envs is None else envs:
        reqs = tuple(pip_block(path))
        lock = root / "envs" / "locks" / f"{path.stem}.txt"
        glibc = GPU_GLIBC if "vllm" in block_pins(list(reqs)) else GLIBC
        cons = (constraints, lock) if locked and lock.exists() else (constraints,)
        out.append(Target(_rel(path, root), reqs, cons, glibc, lock))
    if envs is not None:
        return out
    torch_spec, extras = makefile_value("TORCH_SPEC", root), venv_extras(root)
    gpu_lock = root / "envs" / "locks" / "gpu.txt"
    gpu_cons = (constraints, gpu_lock) if gpu_lock.exists() else (constraints,)
    out += [
        Target("make env", (torch_spec, *project_requirements(extras, root)), (constraints,)),
        # The GPU venv: pip's default torch, then the gpu extra over it: pip's second run moves
        # whatever the first put there, so the check is the union of both.
        Target("make TORCH_SPEC=torch env + .[gpu]", ("torch", *project_requirements([*extras, "gpu"], root)),
               gpu_cons, GPU_GLIBC),
        # .venv-slurm sees .venv's packages: the same union.
        Target("make cluster-env", (torch_spec, *project_requirements([*extras, "slurm"], root)), (constraints,)),
        # The conda path's driver env on the login node (docs/guide/cluster.md).
        Target("conda driver env", ("snakemake", *project_requirements(["slurm"], root, base=False)), (constraints,)),
    ]
    return out


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def pip_command(target: Target, report: Path, index_url: str = INDEX_URL, find_links: Path | None = None) -> list[str]:
    platforms = [f"manylinux_2_{v}_x86_64" for v in range(target.glibc, 4, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    cmd = [sys.executable, "-m", "pip", "--isolated", "--no-input", "--disable-pip-version-check", "--no-color",
           "install", "--dry-run", "--ignore-installed", "--report", str(report), "--progress-bar", "off",
           "--python-version", PYTHON, "--only-binary=:all:", "--index-url", index_url]
    for p in platforms:
        cmd += ["--platform", p]
    if find_links is not None:
        cmd += ["--find-links", str(find_links)]
    for c in target.constraints:
        cmd += ["-c", str(c)]
    return cmd + list(target.requirements)


@dataclass
class Result:
    target: Target
    ok: bool
    seconds: float
    packages: dict[str, str]  # resolved: name -> version
    message: str  # one line, "" when it resolved
    unreachable: bool  # failed because the index could not be reached
    output: str

    def line(self) -> str:
        if self.ok:
            return f"{self.target.name}: resolves ({len(self.packages)} packages, {self.seconds:.0f} s)"
        return f"{self.target.name}: {self.message}"


def failure_message(output: str, where: str = "") -> str:
    """pip's failure in one line: the requirements that conflict, or the one that has no wheel."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "The conflict is caused by:":
            cause = []
            for nxt in lines[i + 1:]:
                if not nxt.strip():
                    break
                cause.append(nxt.strip())
            return "conflict: " + "; ".join(cause)
    for line in lines:
        m = re.match(r"ERROR: No matching distribution found for (.+)", line)
        if m:
            return f"no wheel of {m.group(1)} for {where or 'the target'}"
    errors = [ln.removeprefix("ERROR: ").strip() for ln in lines if ln.startswith("ERROR:")]
    return errors[0] if errors else (lines[-1].strip() if lines else "pip failed with no output")


class Registry:
    """``with Registry() as reg: reg.resolve_all(targets)``: the index as pip sees it during the checks,
    its wheel metadata cached (index_proxy.MetadataIndex) and its source-only releases stood in for."""

    def __init__(self, index_url: str = INDEX_URL, cache: Path | None = None):
        self.index_url = index_url
        self.index = index_proxy.MetadataIndex(index_url, *([cache] if cache else []))
        self._tmp = tempfile.TemporaryDirectory(prefix="presdep-stand-ins-")
        self.stand_ins = index_proxy.StandIns(Path(self._tmp.name), index_url)

    def __enter__(self) -> Self:
        self.index.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.index.__exit__(*exc)
        self._tmp.cleanup()

    def resolve_all(self, targets: list[Target], jobs: int = 8) -> list[Result]:
        """Every target at once: each mostly waits on the index."""
        with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(targets)))) as pool:
            return list(pool.map(self.resolve, targets))

    def resolve(self, target: Target, timeout: float = 900) -> Result:
        """pip's dry run for `target`: what it would install, or why it cannot."""
        env = dict(os.environ, PIP_CONFIG_FILE=os.devnull)  # --isolated alone still reads the site-wide files
        pins = block_pins(list(target.requirements))
        for c in target.constraints:
            pins = read_pins(c) | pins
        start, output, errors = time.monotonic(), "", len(self.index.errors)
        try:
            for name in SDIST_ONLY:
                if name in pins:
                    self.stand_ins.add(name, pins[name])
            for _ in range(4):  # a source-only release pip stumbled on gets its stand-in, then pip again
                with tempfile.TemporaryDirectory(prefix="presdep-resolve-") as tmp:
                    report = Path(tmp) / "report.json"
                    cmd = pip_command(target, report, self.index.url, self.stand_ins.folder)
                    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=timeout)
                    output = proc.stdout + proc.stderr
                    if proc.returncode == 0 and report.exists():
                        data = json.loads(report.read_text(encoding="utf-8"))
                        packages = {i["metadata"]["name"]: i["metadata"]["version"] for i in data["install"]}
                        return Result(target, True, time.monotonic() - start, packages, "", False, output)
                fresh = [n for n in missing_dists(output) if n in pins and f"{n}=={pins[n]}" not in
                         self.stand_ins.done and self.stand_ins.add(n, pins[n])]
                if not fresh:
                    break
        except urllib.error.URLError as exc:
            return Result(target, False, time.monotonic() - start, {}, f"reading a source archive: {exc}",
                          _offline(exc), "")
        message = failure_message(output, target.where())
        if any(c.parent.name == "locks" for c in target.constraints) and message.startswith("conflict"):
            message += " (a stale lock? python envs/resolve.py --lock)"
        offline = len(self.index.errors) > errors or bool(UNREACHABLE.search(output))
        return Result(target, False, time.monotonic() - start, {}, message, offline, output)


def resolve_all(targets: list[Target], index_url: str = INDEX_URL) -> list[Result]:
    with Registry(index_url) as reg:
        return reg.resolve_all(targets)


def missing_dists(output: str) -> list[str]:
    """The packages pip found no distribution of for the target: source-only releases, or no wheel for it."""
    names = re.findall(r"No matching distribution found for ([A-Za-z0-9][A-Za-z0-9._-]*)", output)
    m = re.search(r"no matching distributions available for your environment:\n((?:[ \t]+\S+\n?)+)", output)
    names += m.group(1).split() if m else []
    return list(dict.fromkeys(norm(n) for n in names))


def _offline(exc: urllib.error.URLError) -> bool:
    return isinstance(exc.reason, OSError) and not isinstance(exc.reason, ssl.SSLError)


def registry_unreachable(index_url: str = INDEX_URL, timeout: float = 15) -> str | None:
    """Why the index cannot be reached (no route, no DNS, refused, timed out), or None when it answers."""
    url = index_url.rstrip("/") + "/pip/"
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None  # it answered: an HTTP error is the index's, not the network's
    except urllib.error.URLError as exc:
        if _offline(exc):
            return f"{url}: {exc.reason}"
        raise
    except (TimeoutError, ConnectionError) as exc:
        return f"{url}: {exc!r}"


def lock_text(result: Result) -> str:
    t = result.target
    rows = sorted((norm(n), v) for n, v in result.packages.items())
    head = (f"# {t.name}: what pip resolves for its pip block under envs/constraints.txt, for {t.where()}.\n"
            f"# Written by `python envs/resolve.py --lock`; the env's post-deploy script installs with it.\n")
    return head + "".join(f"{n}=={v}\n" for n, v in rows)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def with_digest(env_text: str, stem: str, lock_digest: str) -> str:
    """The env file with its `# lock sha256:` line set (added above `name:` where missing)."""
    line = f"# lock sha256: {lock_digest}"
    if DIGEST_LINE.search(env_text):
        return DIGEST_LINE.sub(line, env_text, count=1)
    return re.sub(r"^name:", f"{DIGEST_NOTE.format(stem=stem)}\n{line}\nname:", env_text, count=1, flags=re.MULTILINE)


def synced(env_text: str, constraints: dict[str, str]) -> tuple[str, list[str]]:
    """The env file with each pip pin set to the constraints' version; and the pins they lack."""
    out, missing, in_pip = [], [], False
    for line in env_text.splitlines(keepends=True):
        if re.match(r"^\s*-\s*pip:\s*$", line):
            in_pip = True
        m = PIN_LINE.match(line) if in_pip else None
        if m:
            name = norm(m.group(2))
            if name not in constraints:
                missing.append(m.group(2))
            else:
                line = f"{m.group(1)}{m.group(2)}{m.group(3) or ''}=={constraints[name]}{m.group(5)}\n"
        out.append(line)
    return "".join(out), missing


def check(root: Path = ROOT) -> list[str]:
    """Offline: every problem with the pins, the locks, their digests and TORCH_SPEC (empty: none)."""
    problems = []
    cons = read_pins(root / "envs" / "constraints.txt")
    for path in env_files(root):
        name, text = _rel(path, root), path.read_text(encoding="utf-8")
        pins = block_pins(pip_block(path))
        for pkg, ver in sorted(pins.items()):
            if pkg not in cons:
                problems.append(f"{name}: {pkg}=={ver} is not pinned in envs/constraints.txt")
            elif cons[pkg] != ver:
                problems.append(f"{name}: {pkg}=={ver}, envs/constraints.txt pins {cons[pkg]} "
                                "(python envs/resolve.py --sync)")
        lock = root / "envs" / "locks" / f"{path.stem}.txt"
        if not lock.exists():
            problems.append(f"{name}: no lock file {_rel(lock, root)} (python envs/resolve.py --lock)")
            continue
        locked = read_pins(lock)
        for pkg, ver in sorted(pins.items()):
            if locked.get(pkg) != ver:
                problems.append(f"{_rel(lock, root)}: {pkg} {locked.get(pkg, 'missing')}, {name} pins {ver}")
        for pkg, ver in sorted(locked.items()):
            if pkg in cons and cons[pkg] != ver and pkg not in pins:
                problems.append(f"{_rel(lock, root)}: {pkg}=={ver}, envs/constraints.txt pins {cons[pkg]}")
        m = DIGEST_LINE.search(text)
        want = digest(lock.read_text(encoding="utf-8"))
        if not m or m.group(0).split()[-1] != want:
            problems.append(f"{name}: '# lock sha256: {want}' missing or stale (python envs/resolve.py --lock)")
    torch = makefile_value("TORCH_SPEC", root)
    if "torch" in cons and torch != f"torch=={cons['torch']}":
        problems.append(f"Makefile: TORCH_SPEC ?= {torch}, envs/constraints.txt pins torch=={cons['torch']}")
    return problems


def write_locks(results: list[Result], root: Path = ROOT) -> None:
    for r in results:
        if r.target.lock is None:
            continue
        text = lock_text(r)
        r.target.lock.parent.mkdir(parents=True, exist_ok=True)
        r.target.lock.write_text(text, encoding="utf-8")
        env = root / r.target.name
        env.write_text(with_digest(env.read_text(encoding="utf-8"), env.stem, digest(text)), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--lock", action="store_true", help="resolve the env files afresh and write their locks")
    mode.add_argument("--sync", action="store_true", help="set each env file's pins to envs/constraints.txt's")
    mode.add_argument("--check", action="store_true", help="offline: pins, locks and digests agree")
    mode.add_argument("--pip-block", metavar="ENV_FILE", help="print the requirements of an env file's pip block")
    ap.add_argument("--verbose", action="store_true", help="pip's output of each failure")
    args = ap.parse_args(argv)
    if args.pip_block:
        print("\n".join(pip_block(Path(args.pip_block))))
        return 0
    if args.sync:
        cons, bad = read_pins(CONSTRAINTS), False
        for path in env_files():
            text, missing = synced(path.read_text(encoding="utf-8"), cons)
            path.write_text(text, encoding="utf-8")
            for pkg in missing:
                print(f"{_rel(path, ROOT)}: {pkg} is not pinned in envs/constraints.txt", file=sys.stderr)
                bad = True
        return 1 if bad else 0
    if args.check:
        problems = check()
        print("\n".join(problems) or "envs: pins, locks and digests agree")
        return 1 if problems else 0
    reason = registry_unreachable()
    if reason:
        print(f"envs: the index cannot be reached: {reason}", file=sys.stderr)
        return 2
    start = time.monotonic()
    with Registry() as reg:
        if args.lock:
            # The env files first and without their old locks; the gpu path then uses the new gpu lock.
            results = reg.resolve_all(targets(locked=False, envs=env_files()))
            if all(r.ok for r in results):
                write_locks(results)
                results += reg.resolve_all(targets()[len(results):])
        else:
            results = reg.resolve_all(targets())
    for r in results:
        print(r.line())
        if args.verbose and not r.ok:
            print(r.output)
    print(f"envs: {len(results)} resolutions in {time.monotonic() - start:.0f} s")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
