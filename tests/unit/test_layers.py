"""The package's layering holds: import-linter's contracts in pyproject.toml are kept.

The contracts forbid upward imports between the layers of presdep/ and import circles
among sibling modules or packages at any depth. A control package with one upward import
and one circle must break the same kinds of contract, so a contract that silently checks
nothing (a misspelt layer, a wrong root) cannot pass unnoticed.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from workflow_utils import REPO

LINT = Path(sys.executable).with_name("lint-imports")


def _lint(cwd: Path, config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(config), "--no-cache"], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(cwd), "PATH": ""})


def test_presdep_keeps_its_layers_and_has_no_import_circles():
    out = _lint(REPO, REPO / "pyproject.toml")
    assert out.returncode == 0, out.stdout + out.stderr
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    kinds = {c["type"] for c in contracts}
    assert {"layers", "acyclic_siblings"} <= kinds
    assert f"Contracts: {len(contracts)} kept, 0 broken." in out.stdout


def test_every_top_level_package_is_in_a_layer():
    """A new package outside the layers would be unchecked; `exhaustive` refuses it, and so does this."""
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")
    named = {part.strip() for layer in layers["layers"] for part in layer.split("|")}
    present = {p.name for p in (REPO / "presdep").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    present |= {p.stem for p in (REPO / "presdep").glob("*.py") if p.stem != "__init__"}
    assert present == named, f"packages not in a layer: {sorted(present - named)}; layers naming nothing: {sorted(named - present)}"


def test_the_same_contracts_break_on_an_upward_import_and_a_circle(tmp_path):
    pkg = tmp_path / "layered"
    for sub in ("top", "bottom", "bottom/a", "bottom/b"):
        (pkg / sub).mkdir(parents=True, exist_ok=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "top" / "x.py").write_text("")
    (pkg / "bottom" / "up.py").write_text("import layered.top.x\n")  # upward
    (pkg / "bottom" / "a" / "m.py").write_text("import layered.bottom.b.n\n")  # a -> b
    (pkg / "bottom" / "b" / "n.py").write_text("import layered.bottom.a.m\n")  # b -> a: a circle
    config = tmp_path / "contracts.toml"
    config.write_text('[tool.importlinter]\nroot_package = "layered"\n\n'
                      '[[tool.importlinter.contracts]]\nname = "layers"\ntype = "layers"\n'
                      'containers = ["layered"]\nlayers = ["top", "bottom"]\n\n'
                      '[[tool.importlinter.contracts]]\nname = "circles"\ntype = "acyclic_siblings"\n'
                      'ancestors = ["layered"]\n')
    out = _lint(tmp_path, config)
    assert out.returncode != 0
    assert "layers BROKEN" in out.stdout and "circles BROKEN" in out.stdout, out.stdout
