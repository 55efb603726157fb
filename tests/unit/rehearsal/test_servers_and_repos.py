"""The rehearsal's hub repositories and loopback servers: stable commits, exact start and stop,
and the file server and hub answering the real clients."""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from presdep.rehearsal import git_repos, servers

OLAH = Path(__file__).resolve().parents[3] / ".venv-hub" / "bin" / "olah-cli"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _content(tmp: Path, text: str) -> Path:
    d = tmp / "content"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(text)
    (d / "sub").mkdir(exist_ok=True)
    (d / "sub" / "x.txt").write_text("x\n")
    return d


def test_the_same_files_give_the_same_commit_anywhere(tmp_path: Path) -> None:
    a = git_repos.publish(_content(tmp_path / "a", '{"v": 1}'), tmp_path / "hub-a", "models", "Org/Name", "m")
    b = git_repos.publish(_content(tmp_path / "b", '{"v": 1}'), tmp_path / "hub-b", "models", "Org/Name", "m")
    assert a == b and len(a) == 40
    assert git_repos.publish(_content(tmp_path / "a", '{"v": 1}'), tmp_path / "hub-a", "models", "Org/Name", "m") == a, \
        "publishing unchanged files makes no new commit"
    c = git_repos.publish(_content(tmp_path / "a", '{"v": 2}'), tmp_path / "hub-a", "models", "Org/Name", "m2")
    assert c != a and git_repos.head(tmp_path / "hub-a", "models", "Org/Name") == c


def test_a_repo_id_needs_an_org_and_a_name(tmp_path: Path) -> None:
    with pytest.raises(git_repos.HubRepoError, match="expected <org>/<name>"):
        git_repos.repo_path(tmp_path, "models", "just-a-name")
    with pytest.raises(git_repos.HubRepoError, match="repo type"):
        git_repos.repo_path(tmp_path, "spaces", "a/b")


def test_the_file_server_serves_release_files_and_stops_exactly(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    (files / "chat_filtered.json").write_text('[{"id": 1}]')
    ports = servers.Ports(hub=_port(), files=_port())
    state = servers.start(tmp_path / "state", tmp_path / "hub", files, OLAH, ports, only=("files",))
    pid = state["files"]["pid"]
    try:
        url = f"{state['files']['url']}/chat_filtered.json?dl=1"  # a query string is ignored
        assert urllib.request.urlopen(url, timeout=10).read() == b'[{"id": 1}]'
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{state['files']['url']}/", timeout=10)
        assert err.value.code == 404  # no folder listings
        with pytest.raises(servers.ServerError, match="already in use"):
            servers._spawn("again", ["true"], tmp_path / "state", ports.files)
    finally:
        assert servers.stop(tmp_path / "state") == ["files"]
    assert servers.port_free(ports.files)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert servers.stop(tmp_path / "state") == [], "a second stop finds nothing of ours to stop"


@pytest.mark.skipif(not OLAH.exists(), reason="no hub server (make hub-env installs olah)")
def test_the_hub_serves_a_pinned_commit_to_huggingface_hub(tmp_path: Path) -> None:
    import subprocess
    import sys

    commit = git_repos.publish(_content(tmp_path, '{"model_type": "x"}'), tmp_path / "hub", "models", "Org/Tiny", "m")
    ports = servers.Ports(hub=_port(), files=_port())
    state = servers.start(tmp_path / "state", tmp_path / "hub", tmp_path, OLAH, ports, only=("hub",))
    try:
        # A fresh process: huggingface_hub reads HF_ENDPOINT once, at import.
        code = ("import sys; from huggingface_hub import HfApi, snapshot_download; "
                f"print(HfApi().model_info('Org/Tiny', revision='{commit}').sha); "
                f"p = snapshot_download('Org/Tiny', revision='{commit}'); "
                "import pathlib; print(sorted(str(x.relative_to(p)) for x in pathlib.Path(p).rglob('*') if x.is_file()))")
        env = {**os.environ, "HF_ENDPOINT": state["hub"]["url"], "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_XET": "1"}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        sha, files = out.stdout.strip().splitlines()[-2:]
        assert sha == commit
        assert files == "['config.json', 'sub/x.txt']"
    finally:
        servers.stop(tmp_path / "state")


def test_verdict_labels_are_fetched_from_the_hub_at_a_pinned_commit(tmp_path: Path) -> None:
    """fetch_verdict_labels against the loopback hub serving Climate-FEVER's stand-in claims: the
    rows kept as published, the manifest with the commit read and the classes counted."""
    import json
    import subprocess
    import sys

    from presdep.rehearsal.originals import write_originals

    write_originals(tmp_path / "orig", queries=5)
    repo = tmp_path / "orig" / "hub" / "datasets" / "tdiggelm" / "climate_fever"
    commit = git_repos.publish(repo, tmp_path / "hub", "datasets", "tdiggelm/climate_fever", "claims")
    ports = servers.Ports(hub=_port(), files=_port())
    state = servers.start(tmp_path / "state", tmp_path / "hub", tmp_path, OLAH, ports, only=("hub",))
    try:
        source = {"kind": "hf_datasets", "id": "tdiggelm/climate_fever", "split": "test", "revision": commit,
                  "format": "climate_fever"}
        code = ("import json, sys; from presdep.data.verdict_labels import fetch_verdict_labels; "
                f"m = fetch_verdict_labels('climate-fever', {source!r}, sys.argv[1], sys.argv[2], sys.argv[3]); "
                "print(json.dumps(m.rows))")
        env = {**os.environ, "HF_ENDPOINT": state["hub"]["url"], "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_XET": "1"}
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "labels.parquet"), str(tmp_path / "m.json"),
                              str(tmp_path / "downloads")], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
    finally:
        servers.stop(tmp_path / "state")
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    assert rows["claims"] == 5 and {"SUPPORTED", "REFUTED", "NEI", "DISPUTED"} <= set(rows)
    manifest = json.loads((tmp_path / "m.json").read_text())
    assert manifest["version"]["revision"] == commit and manifest["version"]["pinned"] is True
    from presdep.data.verdict_labels import read_verdict_labels

    assert read_verdict_labels(tmp_path / "labels.parquet", "climate_fever").height == 5
