"""Scorers named by where their factory lives, with no install step.

``scorer: "package.module:factory"`` imports an importable module; ``scorer:
"path/to/file.py:factory"`` loads a Python file, a relative path read from the working
directory (the repository root, where Snakemake runs). A file's sha256 is part of the
scorer's identity, so editing the file re-runs the jobs of the variants that name it.
Registered names (built-ins, entry points) are looked up first (:mod:`presdep.config.scorers`):
a spec never shadows them.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from presdep.contracts.errors import InvalidInput

FORMS = "'package.module:factory' (an importable module) or 'path/to/file.py:factory' (a Python file)"
# The modules of loaded files, by (resolved path, sha256 of the bytes): an edited file loads anew.
_FILE_MODULES: dict[tuple[str, str], types.ModuleType] = {}


@dataclass(frozen=True)
class LoadedFactory:
    """A spec's factory and, for a file, the sha256 of the bytes it was loaded from."""

    factory: Callable[..., Any]
    sha256: str | None


def is_spec(name: Any) -> bool:
    """Whether a ``scorer:`` value names a factory's location (registered names have no colon)."""
    return isinstance(name, str) and ":" in name


def is_file_spec(spec: str) -> bool:
    target = spec.rpartition(":")[0]
    return target.endswith(".py") or "/" in target or "\\" in target


def load_spec(spec: str) -> LoadedFactory:
    """The factory ``spec`` names; :class:`InvalidInput` in one line saying what was expected."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr.isidentifier():
        raise InvalidInput(f"scorer {spec!r}: expected {FORMS}")
    if is_file_spec(spec):
        (module, digest), expected = _load_file(spec, target), "a Python file 'path/to/file.py:factory'"
    else:
        module, digest, expected = _import_module(spec, target), None, "an importable module 'package.module:factory'"
    factory = getattr(module, attr, None)
    if factory is None:
        raise InvalidInput(f"scorer {spec!r}: {target} has no attribute {attr!r}; expected {expected} whose "
                           f"'{attr}' is a factory (run, prompt) -> scorer")
    if not callable(factory):
        raise InvalidInput(f"scorer {spec!r}: {target}:{attr} is a {type(factory).__name__}, not callable; expected "
                           "a factory (run, prompt) -> scorer")
    return LoadedFactory(factory, digest)


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def _read(spec: str, target: str) -> bytes:
    path = Path(target)
    if path.suffix != ".py":
        raise InvalidInput(f"scorer {spec!r}: {target} is not a .py file; expected {FORMS}")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"scorer {spec!r}: cannot read {target} ({exc.strerror}; relative paths are read from "
                           f"{Path.cwd()}); expected a Python file 'path/to/file.py:factory'") from exc


def _load_file(spec: str, target: str) -> tuple[types.ModuleType, str]:
    data = _read(spec, target)
    digest = hashlib.sha256(data).hexdigest()
    path = str(Path(target).resolve())
    key = (path, digest)
    if key in _FILE_MODULES:
        return _FILE_MODULES[key], digest
    try:
        code = compile(data, path, "exec")  # exactly the bytes hashed
    except SyntaxError as exc:
        raise InvalidInput(f"scorer {spec!r}: syntax error in {target} line {exc.lineno}: {exc.msg}; expected a "
                           "Python file 'path/to/file.py:factory'") from exc
    name = f"_presdep_scorer_file_{digest[:16]}"
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module  # dataclasses and pickling look their module up by name
    try:
        exec(code, module.__dict__)
    except Exception as exc:
        del sys.modules[name]
        raise InvalidInput(f"scorer {spec!r}: {target} failed to load: {_one_line(exc)}") from exc
    _FILE_MODULES[key] = module
    return module, digest


def _import_module(spec: str, target: str) -> types.ModuleType:
    if not all(part.isidentifier() for part in target.split(".")):
        raise InvalidInput(f"scorer {spec!r}: {target!r} is not a module name; expected {FORMS}")
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        raise InvalidInput(f"scorer {spec!r}: cannot import module {target!r} ({_one_line(exc)}); expected an "
                           "importable module 'package.module:factory' (or a file 'path/to/file.py:factory')") from exc
    except Exception as exc:  # the module's own code failed: name it
        raise InvalidInput(f"scorer {spec!r}: module {target!r} failed to import: {_one_line(exc)}") from exc


__all__ = ["FORMS", "LoadedFactory", "is_file_spec", "is_spec", "load_spec"]
