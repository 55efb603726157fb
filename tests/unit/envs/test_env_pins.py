"""Offline: envs/constraints.txt holds the versions; the env files' pins, their locks, the locks'
digests and the Makefile's TORCH_SPEC agree with it; pip's failures read as one line; the
post-deploy scripts install each env's lock."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

PIP_CONFLICT = """\
Collecting vllm==0.33.0
ERROR: Cannot install transformers==5.24.0 and vllm==0.33.0 because these package versions have conflicting dependencies.

The conflict is caused by:
    The user requested transformers==5.24.0
    vllm 0.33.0 depends on transformers<5.21.0 and >=5.16.1

Additionally, some packages in these conflicts have no matching distributions available for your environment:
    transformers

To fix this you could try to:
1. loosen the range of package versions you've specified

ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/
"""
PIP_NO_WHEEL = """\
ERROR: Could not find a version that satisfies the requirement llguidance<1.8.0,>=1.7.0 (from vllm) (from versions: 1.6.1)
ERROR: No matching distribution found for llguidance<1.8.0,>=1.7.0 (from vllm)
"""


def test_env_files_locks_digests_and_torch_spec_agree_with_the_constraints(resolve):
    assert resolve.check() == []


def test_the_venvs_and_the_gpu_jobs_share_their_stack(resolve):
    """Where the CPU venv (constraints.txt) and the GPU envs' locks overlap, the versions are the same."""
    cons = resolve.read_pins(REPO / "envs" / "constraints.txt")
    for env in ("gpu", "training"):
        locked = resolve.read_pins(REPO / "envs" / "locks" / f"{env}.txt")
        for pkg in ("torch", "transformers", "tokenizers", "numpy", "peft", "safetensors", "huggingface-hub"):
            assert locked[pkg] == cons[pkg], (env, pkg)
    assert resolve.makefile_value("TORCH_SPEC") == f"torch=={cons['torch']}"


def _copy_repo_envs(tmp: Path) -> Path:
    shutil.copytree(REPO / "envs", tmp / "envs", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    shutil.copy(REPO / "Makefile", tmp / "Makefile")
    return tmp


def test_check_names_each_drift(resolve, tmp_path):
    root = _copy_repo_envs(tmp_path)
    cons = resolve.read_pins(root / "envs" / "constraints.txt")
    gpu = root / "envs" / "gpu.yaml"
    gpu.write_text(gpu.read_text().replace(f"numpy=={cons['numpy']}", "numpy==2.4.6"))
    lock = root / "envs" / "locks" / "training.txt"
    lock.write_text(lock.read_text().replace(f"peft=={cons['peft']}", "peft==0.1.0"))
    make = root / "Makefile"
    make.write_text(make.read_text().replace("TORCH_SPEC ?= torch==", "TORCH_SPEC ?= torch==2.0.0#"))
    problems = resolve.check(root)
    assert (f"envs/gpu.yaml: numpy==2.4.6, envs/constraints.txt pins {cons['numpy']} "
            "(python envs/resolve.py --sync)") in problems
    assert f"envs/locks/gpu.txt: numpy {cons['numpy']}, envs/gpu.yaml pins 2.4.6" in problems
    assert f"envs/locks/training.txt: peft 0.1.0, envs/training.yaml pins {cons['peft']}" in problems
    assert any(p.startswith("envs/training.yaml: '# lock sha256: ") for p in problems)
    assert any(p.startswith("Makefile: TORCH_SPEC ?= torch==2.0.0") for p in problems)


def test_sync_sets_each_pin_from_the_constraints_and_keeps_the_rest(resolve):
    text = ("# a comment numpy==1.0\nname: x\ndependencies:\n  - python=3.11\n  - pip:\n"
            "      # a note\n      - numpy==2.4.6  # why\n      - vllm==0.1\n      - unpinned-here==1\n")
    out, missing = resolve.synced(text, {"numpy": "2.3.5", "vllm": "0.32.0"})
    assert out == text.replace("numpy==2.4.6  #", "numpy==2.3.5  #").replace("vllm==0.1", "vllm==0.32.0")
    assert missing == ["unpinned-here"]


def test_lock_digest_line_is_added_then_replaced(resolve):
    text = "# header\nname: x\n"
    once = resolve.with_digest(text, "gpu", "aaaa")
    assert once.splitlines()[2] == "# lock sha256: aaaa" and once.endswith("name: x\n")
    assert resolve.with_digest(once, "gpu", "bbbb") == once.replace("aaaa", "bbbb")


def test_pip_failures_read_as_one_line(resolve):
    assert resolve.failure_message(PIP_CONFLICT) == (
        "conflict: The user requested transformers==5.24.0; vllm 0.33.0 depends on transformers<5.21.0 and >=5.16.1")
    assert resolve.failure_message(PIP_NO_WHEEL, "Linux x86_64 (glibc >= 2.28), Python 3.11") == (
        "no wheel of llguidance<1.8.0,>=1.7.0 (from vllm) for Linux x86_64 (glibc >= 2.28), Python 3.11")
    assert resolve.missing_dists(PIP_CONFLICT) == ["transformers"]
    assert resolve.missing_dists(PIP_NO_WHEEL) == ["llguidance"]
    assert not resolve.UNREACHABLE.search(PIP_CONFLICT + PIP_NO_WHEEL)


def test_an_unreachable_index_is_told_apart(resolve, tmp_path):
    """Nothing listens on port 9 here: the probe says so, and a resolution is marked unreachable (a skip)."""
    dead = "http://127.0.0.1:9/simple/"
    assert "refused" in resolve.registry_unreachable(dead).lower()
    target = resolve.Target("t", ("numpy==2.3.5",), ())
    with resolve.Registry(dead, cache=tmp_path) as reg:
        result = reg.resolve(target)
    assert not result.ok and result.unreachable, result.output


def test_pip_runs_isolated_for_the_target(resolve, tmp_path):
    target = resolve.Target("t", ("a==1",), (tmp_path / "c.txt",), glibc=31)
    cmd = resolve.pip_command(target, tmp_path / "r.json", "http://127.0.0.1:1/simple/")
    assert cmd[:4] == [sys.executable, "-m", "pip", "--isolated"]
    assert {"--dry-run", "--ignore-installed", "--only-binary=:all:"} <= set(cmd)
    platforms = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--platform"]
    assert platforms[0] == "manylinux_2_31_x86_64" and "manylinux_2_17_x86_64" in platforms
    assert "manylinux_2_32_x86_64" not in platforms and "manylinux2014_x86_64" in platforms
    assert cmd[-3:] == ["-c", str(tmp_path / "c.txt"), "a==1"]


def test_the_metadata_index_lists_only_wheels_for_linux_x86_64_python_311(resolve):
    keep = resolve.index_proxy.linux_x86_64_wheel
    assert keep("numpy-2.3.5-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", "3.11")
    assert keep("vllm-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl", "3.11")
    assert keep("six-1.17.0-py2.py3-none-any.whl", "3.11")
    assert not keep("numpy-2.3.5-cp312-cp312-manylinux_2_28_x86_64.whl", "3.11")
    assert not keep("numpy-2.3.5-cp311-cp311-win_amd64.whl", "3.11")
    assert not keep("numpy-2.3.5-cp311-cp311-manylinux_2_28_aarch64.whl", "3.11")
    assert not keep("x-1-cp310-cp310-manylinux1_x86_64.whl", "3.11")
    assert not keep("numpy-2.3.5.tar.gz", "3.11")


def test_old_setuptools_archives_list_their_requirements_in_requires_txt(resolve):
    text = "a>=1\nb\n\n[:python_version < \"3.12\"]\nc\n\n[extra]\nd\n"
    assert resolve.index_proxy._egg_requires(text) == ["a>=1", "b", 'c; python_version < "3.12"']


def test_post_deploy_scripts_install_their_env_lock(resolve, tmp_path):
    """Each post-deploy script names its env; install-presdep.sh installs the block under the lock."""
    for env in resolve.env_files():
        script = (REPO / "envs" / f"{env.stem}.post-deploy.sh").read_text()
        assert f"PRESDEP_ENV={env.stem} " in script and script.strip().endswith("envs/install-presdep.sh")
    # A `python` that runs envs/resolve.py and records what pip is asked.
    log = tmp_path / "pip.log"
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nif [ "$1" = envs/resolve.py ]; then exec {sys.executable} "$@"; fi\n'
                    f'echo "$@" >> {log}\n')
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{fake.parent}{os.pathsep}{os.environ['PATH']}", PRESDEP_ENV="gpu")
    subprocess.run(["sh", "envs/install-presdep.sh"], cwd=REPO, env=env, check=True)
    block = resolve.pip_block(REPO / "envs" / "gpu.yaml")
    assert log.read_text().splitlines() == [
        "-m pip install --quiet -c envs/locks/gpu.txt " + " ".join(block),
        "-m pip install --quiet --no-deps --no-build-isolation -e .",
    ]
