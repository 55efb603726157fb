"""Java detection for pyserini: version parsing, search order and the missing-Java error."""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

import pytest

from presdep.runtime import java
from presdep.runtime.java import JavaNotFoundError, ensure_java, find_java_home, parse_java_version

BANNERS = {
    'openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment (build 17.0.15+6-Debian-1deb12u1)': 17,
    'openjdk version "25" 2025-09-16\nOpenJDK Runtime Environment Temurin-25+36': 25,
    'openjdk version "21.0.2" 2024-01-16 LTS': 21,
    'java version "1.8.0_392"\nJava(TM) SE Runtime Environment (build 1.8.0_392-b08)': 8,
    'openjdk version "22-ea" 2024-03-19': 22,
}


@pytest.mark.parametrize("banner,major", list(BANNERS.items()))
def test_parse_java_version(banner: str, major: int) -> None:
    assert parse_java_version(banner) == major


def test_parse_java_version_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="version"):
        parse_java_version("bash: java: command not found")


def fake_jdk(root: Path, banner: str) -> Path:
    """A folder with bin/java that prints ``banner`` to stderr like the real one."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    exe = bin_dir / "java"
    # printf is a shell builtin: the fake must work with PATH stripped to nothing useful.
    exe.write_text(f"#!/bin/sh\nprintf '%s\\n' {shlex.quote(banner)} >&2\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return root


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """No real JDK visible: empty search locations, PATH with only a temp folder."""
    # ensure_java writes os.environ itself; restore both variables exactly afterwards
    saved = {k: os.environ.get(k) for k in ("JAVA_HOME", "PATH")}
    empty = tmp_path / "emptybin"
    empty.mkdir()
    monkeypatch.setattr(java, "SEARCH_GLOBS", [str(tmp_path / "jvms" / "*")])
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    yield tmp_path
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def test_only_java17_gives_actionable_error(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jdk17 = fake_jdk(isolated / "jdk17", 'openjdk version "17.0.15" 2025-04-15')
    monkeypatch.setenv("JAVA_HOME", str(jdk17))
    monkeypatch.setenv("PATH", f"{jdk17 / 'bin'}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(JavaNotFoundError) as err:
        find_java_home(21)
    msg = str(err.value)
    assert "Java >= 21" in msg  # the problem
    assert str(jdk17) in msg and "Java 17" in msg  # what was found
    assert "openjdk" in msg and "envs/retrieval.yaml" in msg  # the fix


def test_no_java_at_all(isolated: Path) -> None:
    with pytest.raises(JavaNotFoundError, match="seen: none"):
        find_java_home(21)


def test_prefers_new_enough_java_home(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jdk21 = fake_jdk(isolated / "home21", 'openjdk version "21.0.2" 2024-01-16')
    fake_jdk(isolated / "jvms" / "jdk25", 'openjdk version "25" 2025-09-16')
    monkeypatch.setenv("JAVA_HOME", str(jdk21))
    assert find_java_home(21) == jdk21


def test_too_old_java_home_falls_back_to_newest(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(fake_jdk(isolated / "home17", 'openjdk version "17.0.1"')))
    fake_jdk(isolated / "jvms" / "a-jdk21", 'openjdk version "21.0.2"')
    jdk25 = fake_jdk(isolated / "jvms" / "b-jdk25", 'openjdk version "25"')
    fake_jdk(isolated / "jvms" / "c-jdk8", 'java version "1.8.0_392"')
    assert find_java_home(21) == jdk25


def test_java_on_path_through_symlink(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jdk = fake_jdk(isolated / "opt" / "jdk22", 'openjdk version "22.0.1"')
    link_dir = isolated / "usrbin"
    link_dir.mkdir()
    (link_dir / "java").symlink_to(jdk / "bin" / "java")
    monkeypatch.setenv("PATH", str(link_dir))
    assert find_java_home(21) == jdk.resolve()


def test_ensure_java_sets_environment(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jdk = fake_jdk(isolated / "jvms" / "jdk21", 'openjdk version "21.0.2"')
    home = ensure_java(21)
    assert home == jdk
    assert os.environ["JAVA_HOME"] == str(jdk)
    assert os.environ["PATH"].split(os.pathsep)[0] == str(jdk / "bin")


def test_real_machine_java() -> None:
    """Whatever this machine has: either a Java >= 21 that really reports >= 21, or the error."""
    try:
        home = find_java_home(21)
    except JavaNotFoundError as exc:
        pytest.skip(f"no Java >= 21 here: {exc}")
    assert (java.java_version(home) or 0) >= 21
