"""Registry check: pip's own resolver, for Linux x86_64 and Python 3.11, resolves every env file
(under envs/constraints.txt and its lock) and every documented install path, and fails, naming
the env file and the requirements, on the pins of the old gpu env (vLLM 0.33.0, transformers 5.24.0).

All resolutions run at once through one local metadata index (envs/index_proxy.py); they skip only
where the package index cannot be reached."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.registry

# envs/gpu.yaml as it was: vLLM 0.33.0 asks transformers<5.21 (and mistral_common numpy<2.4).
OLD_GPU_YAML = """\
name: presdep-inference
channels: [conda-forge]
dependencies:
  - python=3.11
  - pip
  - pip:
      - vllm==0.33.0
      - transformers==5.24.0
      - tokenizers==0.23.3
      - peft==0.21.2
      - numpy==2.4.6
"""


@pytest.fixture(scope="module")
def resolved(resolve, tmp_path_factory):
    """{target name: result} for the repository's targets, and the result of the old gpu pins."""
    reason = resolve.registry_unreachable()
    if reason:
        pytest.skip(f"the package index cannot be reached: {reason}")
    root = tmp_path_factory.mktemp("old-pins")
    (root / "envs").mkdir()
    (root / "envs" / "gpu.yaml").write_text(OLD_GPU_YAML, encoding="utf-8")
    (root / "envs" / "constraints.txt").write_text("", encoding="utf-8")  # the env file's pins alone
    old = resolve.targets(root=root, locked=False, envs=[root / "envs" / "gpu.yaml"])[0]
    start = time.monotonic()
    with resolve.Registry() as reg:
        results = reg.resolve_all([*resolve.targets(), old])
    print(f"\n{len(results)} resolutions in {time.monotonic() - start:.1f} s")
    return {r.target.name: r for r in results[:-1]}, results[-1]


def _ok(result):
    if not result.ok and result.unreachable:
        pytest.skip(f"the package index cannot be reached: {result.line()}")
    assert result.ok, result.line()


def test_resolves(resolved, target_name):
    _ok(resolved[0][target_name])


def test_locks_are_what_pip_resolves(resolve, resolved):
    """Each env file's lock is complete and current: resolved under it, pip installs exactly it."""
    results, _ = resolved
    for path in resolve.env_files():
        result = results[f"envs/{path.name}"]
        _ok(result)
        got = {resolve.norm(n): v for n, v in result.packages.items()}
        assert got == resolve.read_pins(result.target.lock), f"{result.target.lock} (python envs/resolve.py --lock)"


def test_old_gpu_pins_fail_naming_vllm_and_transformers(resolved):
    _, old = resolved
    if old.unreachable:
        pytest.skip(f"the package index cannot be reached: {old.line()}")
    assert not old.ok
    line = old.line()
    print("\n" + line)
    assert "\n" not in line
    assert line.startswith("envs/gpu.yaml: conflict: ")
    assert "vllm 0.33.0 depends on transformers<5.21.0" in line and "transformers==5.24.0" in line
