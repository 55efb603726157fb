"""Find a Java runtime new enough for Anserini (pyserini's Lucene backend).

pyserini 1.x ships an Anserini jar compiled for Java 21, while many machines default
to Java 17. pyjnius reads ``JAVA_HOME`` once, when the JVM starts, so
:func:`ensure_java` must run before ``jnius`` (or anything in ``pyserini``) is imported.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from presdep.contracts.errors import InvalidInput, PresdepError

log = logging.getLogger(__name__)

MIN_JAVA = 21

# Where JDKs usually live. Module-level so tests (and unusual machines) can change them.
SEARCH_GLOBS: list[str] = [
    "/usr/lib/jvm/*",  # Debian, Ubuntu, Fedora packages and most tarball installs
    "/usr/java/*",  # Oracle RPMs
    "/opt/java/*",  # container images (e.g. eclipse-temurin)
    "/Library/Java/JavaVirtualMachines/*/Contents/Home",  # macOS
]

INSTALL_HINT = (
    "Install a JDK >= {min} and point JAVA_HOME at it, e.g. "
    "`conda env create -f envs/retrieval.yaml` (openjdk 21), "
    "`apt-get install openjdk-21-jdk-headless` (Debian/Ubuntu), "
    "`brew install openjdk@21` (macOS), or a Temurin build from adoptium.net."
)

_VERSION_RE = re.compile(r'version\s+"([^"]+)"')


class JavaNotFoundError(PresdepError, RuntimeError):
    """No Java runtime with the required major version was found."""


@dataclass(frozen=True)
class JavaCandidate:
    home: Path
    version: int | None  # None when `java -version` could not be run or parsed
    source: str  # where we found it (for the error message)


def parse_java_version(banner: str) -> int:
    """Major version from ``java -version`` output.

    Handles ``openjdk version "17.0.15"``, ``openjdk version "25" 2025-09-16``,
    ``java version "1.8.0_392"`` (old scheme: major is the second number) and
    early-access strings such as ``"22-ea"``.
    """
    match = _VERSION_RE.search(banner)
    if not match:
        raise InvalidInput(f"no 'version \"...\"' in java -version output: {banner.strip()[:200]!r}")
    raw = match.group(1)
    parts = re.split(r"[._+\-]", raw)
    try:
        major = int(parts[0])
        if major == 1 and len(parts) > 1:
            major = int(parts[1])
    except ValueError:
        raise InvalidInput(f"cannot read a major version from {raw!r}") from None
    return major


def java_version(home: Path) -> int | None:
    """Major version of ``home/bin/java``, or None if it does not run or says nothing usable."""
    exe = home / "bin" / "java"
    if not exe.is_file() or not os.access(exe, os.X_OK):
        return None
    try:
        proc = subprocess.run(
            [str(exe), "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    # `java -version` writes to stderr; a few wrappers use stdout.
    try:
        return parse_java_version(proc.stderr + "\n" + proc.stdout)
    except ValueError:
        return None


def _candidates() -> list[JavaCandidate]:
    """Every Java home we can see, in the order of preference before version sorting."""
    seen: set[Path] = set()
    found: list[JavaCandidate] = []

    def add(home: Path, source: str) -> None:
        try:
            key = home.resolve()
        except OSError:
            return
        if key in seen:  # /usr/lib/jvm has symlinked aliases of the same JDK
            return
        seen.add(key)
        found.append(JavaCandidate(home, java_version(home), source))

    env_home = os.environ.get("JAVA_HOME")
    if env_home:
        add(Path(env_home), "JAVA_HOME")
    for pattern in SEARCH_GLOBS:
        for hit in sorted(glob.glob(pattern)):
            if Path(hit, "bin", "java").exists():
                add(Path(hit), pattern)
    on_path = shutil.which("java")
    if on_path:
        # bin/java may be a chain of symlinks (/usr/bin/java -> alternatives -> the JDK)
        add(Path(on_path).resolve().parent.parent, "java on PATH")
    return found


def find_java_home(min_version: int = MIN_JAVA) -> Path:
    """The Java home to use: JAVA_HOME if it is new enough, else the newest JDK >= min_version.

    Raises :class:`JavaNotFoundError` listing what was found and how to install one.
    """
    env_home = os.environ.get("JAVA_HOME")
    if env_home and (java_version(Path(env_home)) or 0) >= min_version:
        return Path(env_home)  # the user's (or an earlier ensure_java's) choice; no search needed
    cands = _candidates()
    good = [c for c in cands if (c.version or 0) >= min_version]
    if good:
        # Newest first; ties keep discovery order so the choice is deterministic.
        best = max(good, key=lambda c: c.version or 0)
        return best.home
    seen = "; ".join(
        f"{c.home} (Java {c.version if c.version is not None else 'unreadable'}, from {c.source})"
        for c in cands
    ) or "none"
    raise JavaNotFoundError(
        f"pyserini/Anserini needs Java >= {min_version}, but no such Java was found. "
        f"Java installations seen: {seen}. " + INSTALL_HINT.format(min=min_version)
    )


def ensure_java(min_version: int = MIN_JAVA) -> Path:
    """Set JAVA_HOME and PATH of this process to a Java >= min_version and return its home.

    Call before importing ``jnius``/``pyserini``: pyjnius reads JAVA_HOME when the JVM starts.
    """
    home = find_java_home(min_version)
    if os.environ.get("JAVA_HOME") != str(home):
        log.info("using Java at %s (JAVA_HOME was %s)", home, os.environ.get("JAVA_HOME"))
    os.environ["JAVA_HOME"] = str(home)
    bin_dir = str(home / "bin")
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + (os.pathsep + path if path else "")
    try:
        import jnius_config  # noqa: PLC0415 - only to detect a JVM started too early

        if jnius_config.vm_running:
            log.warning("a JVM is already running in this process; JAVA_HOME=%s applies only to subprocesses", home)
    except ImportError:
        pass
    return home


def anserini_autoclass():
    """pyjnius' autoclass with the Anserini jar on the classpath and a Java >= 21 JVM."""
    ensure_java(MIN_JAVA)
    from pyserini.pyclass import autoclass  # noqa: PLC0415 - must follow ensure_java

    return autoclass
