"""Hub repositories as the local hub serves them: one git repository per model or dataset.

The hub server (olah) reads ``<mirrors>/<models|datasets>/<org>/<name>`` as git repositories
and answers the hub's HTTP API from their commits, so a client pins a revision exactly as it
pins one on huggingface.co. Commits are made with a fixed author and date, so the same files
give the same commit hash on every machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from presdep.contracts.errors import PresdepError

REPO_TYPES = ("models", "datasets")
# Fixed identity and time: a commit's hash depends on them as much as on the files.
_IDENTITY = {"GIT_AUTHOR_NAME": "presdep rehearsal", "GIT_AUTHOR_EMAIL": "rehearsal@presdep.invalid",
             "GIT_COMMITTER_NAME": "presdep rehearsal", "GIT_COMMITTER_EMAIL": "rehearsal@presdep.invalid",
             "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00"}


class HubRepoError(PresdepError, RuntimeError):
    """A hub repository could not be written."""


def _git(repo: Path, *args: str) -> str:
    # No user or system git config: hooks, signing or autocrlf there would change the commit.
    env = {**os.environ, **_IDENTITY, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    proc = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise HubRepoError(f"git {' '.join(args)} in {repo} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout.strip()


def repo_path(mirrors: Path, repo_type: str, repo_id: str) -> Path:
    if repo_type not in REPO_TYPES:
        raise HubRepoError(f"repo type {repo_type!r}; expected one of {REPO_TYPES}")
    org, _, name = repo_id.partition("/")
    if not org or not name or "/" in name:
        raise HubRepoError(f"repo id {repo_id!r}; expected <org>/<name>")
    return Path(mirrors) / repo_type / org / name


def publish(content: Path, mirrors: Path, repo_type: str, repo_id: str, message: str) -> str:
    """Commit ``content``'s files as the next commit of the repository's main branch; its hash.

    Unchanged files give no new commit (the current head is returned), so publishing again
    keeps every pin valid; changed files give a new commit, as a push to the hub would.
    """
    repo = repo_path(mirrors, repo_type, repo_id)
    if not (repo / ".git").is_dir():
        repo.mkdir(parents=True, exist_ok=True)
        _git(repo, "init", "--quiet", "--initial-branch=main")
    for old in repo.iterdir():
        if old.name != ".git":
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    shutil.copytree(content, repo, dirs_exist_ok=True)
    _git(repo, "add", "--all")
    if _git(repo, "status", "--porcelain"):
        _git(repo, "commit", "--quiet", "--no-verify", "-m", message)
    return head(mirrors, repo_type, repo_id)


def head(mirrors: Path, repo_type: str, repo_id: str) -> str:
    """The commit hash of the repository's main branch."""
    return _git(repo_path(mirrors, repo_type, repo_id), "rev-parse", "main")
