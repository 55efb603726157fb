"""Each environment's pinned stack against what this Python has installed.

The pins are the ``pip:`` blocks of the workflow's conda environment files (``envs/*.yaml``),
which hold the same versions as ``envs/constraints.txt``. A node that runs a rule family's jobs
must import that family's stack at those versions, or its jobs run another transformers,
numpy or peft than the tests did.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from presdep.config.yaml_io import load_yaml

PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*([^\s;#]+)")


@dataclass(frozen=True)
class PinCheck:
    env: str
    package: str
    pinned: str
    installed: str | None

    @property
    def ok(self) -> bool:
        # A local version label names the build (torch 2.13.0+cpu, +cu128), not another release.
        return self.installed is not None and self.installed.split("+")[0] == self.pinned

    def line(self) -> str:
        if self.installed is None:
            return f"{self.env}: {self.package} missing (pinned {self.pinned})"
        return f"{self.env}: {self.package} {self.installed} installed, pinned {self.pinned}"


def env_pins(path: Path) -> dict[str, str]:
    """``name -> version`` of every ``name==version`` line of an env file's ``pip:`` block."""
    data = load_yaml(path) or {}
    pins: dict[str, str] = {}
    for dep in data.get("dependencies") or []:
        if isinstance(dep, dict):
            for line in dep.get("pip") or []:
                m = PIN.match(str(line))
                if m:
                    pins[_norm(m.group(1))] = m.group(2)
    return pins


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def check_envs(envs_dir: str | Path = "envs") -> dict[str, list[PinCheck]]:
    """Per env file (its stem): every pin with the version this Python has (None: missing)."""
    out: dict[str, list[PinCheck]] = {}
    for path in sorted(Path(envs_dir).glob("*.yaml")):
        pins = env_pins(path)
        if pins:
            out[path.name] = [PinCheck(path.name, p, v, installed_version(p)) for p, v in sorted(pins.items())]
    return out


def stack_report(checks: dict[str, list[PinCheck]]) -> list[str]:
    """One line per env: matched, or its missing and mismatched packages."""
    lines = []
    for env, rows in checks.items():
        bad = [r for r in rows if not r.ok]
        if not bad:
            lines.append(f"{env}: all {len(rows)} pinned packages installed at their pins")
        else:
            lines.append(f"{env}: {len(bad)} of {len(rows)} pinned packages missing or mismatched")
            lines.extend(f"  {r.line()}" for r in bad)
    return lines


__all__ = ["PinCheck", "check_envs", "env_pins", "installed_version", "stack_report"]
