"""Secrets pasted into a config never reach an error message or a log.

A config names the environment variable that holds a key (``api_key_env``), never the key.
When a key is pasted anyway, the error that refuses it must not print it: Snakemake shows
config errors on the terminal and keeps them in ``.snakemake/log/``. jsonschema's messages
repeat the offending value (``'sk-proj-...' does not match '^[A-Z_][A-Z0-9_]*$'``), so every
config error message passes through :func:`masked_text` with the secrets of its config.

A string counts as a secret when it has the shape of a common API key or token
(:data:`_KEY_SHAPES`), when it is a long random-looking token (:func:`looks_like_secret`), or
when it is the value of a key whose name says it holds one (:data:`SECRET_NAME_PARTS`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

# Key names whose string values are masked whatever they look like: a word of the name (split at
# '_', '-' and '.') that is or ends with one of these (api_key_env, hf_token, apikey; not max_tokens).
SECRET_NAME_PARTS = ("key", "token", "secret", "password", "passwd", "authorization", "credential", "credentials")
# Well-known key and token formats (OpenAI/Anthropic, GitHub, Hugging Face, Slack, AWS, Google,
# GitLab, JWTs, a pasted Authorization header), each starting a word ("task-..." holds no key).
_KEY_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:sk-[A-Za-z0-9_\-]{16,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"
    r"|hf_[A-Za-z0-9]{30,}|xox[abposr]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_\-]{35}"
    r"|glpat-[A-Za-z0-9_\-]{20,}"
    r"|eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}|Bearer\s+\S{16,})"
)
# A random token: long, one word of base64-ish characters, all three character classes.
_TOKEN = re.compile(r"[A-Za-z0-9_\-+/=]{32,}")
_HEX = re.compile(r"[0-9a-fA-F]+")
# Bits per character: random base62 tokens of 32+ characters measure ~4.5 and more; model ids
# and paths of the same length (sentence-transformers/msmarco-MiniLM-L6-cos-v5) about 4.0.
_MIN_TOKEN_ENTROPY = 4.2
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")  # the schema's pattern of api_key_env


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def looks_like_secret(value: object) -> bool:
    """Whether a string has the shape of an API key or a random token (a digest is neither)."""
    if not isinstance(value, str):
        return False
    if _KEY_SHAPES.search(value):
        return True
    return bool(_TOKEN.fullmatch(value) and not _HEX.fullmatch(value)
                and re.search(r"[a-z]", value) and re.search(r"[A-Z]", value) and re.search(r"[0-9]", value)
                and _entropy(value) >= _MIN_TOKEN_ENTROPY)


def is_secret_name(name: object) -> bool:
    """Whether a config key's name says its value is a secret (``api_key``, ``hf_token``, ...)."""
    words = re.split(r"[_\-.]", str(name).lower())
    return any(word.endswith(part) for word in words for part in SECRET_NAME_PARTS)


def mask(value: str) -> str:
    """``sk-p…(masked, 51 chars)``: a few leading characters of a long value, never the rest."""
    head = value[:4] if len(value) >= 16 else ""
    return f"{head}…(masked, {len(value)} chars)"


def config_secrets(config: Any, name: object = "", *, by_name: bool = False) -> set[str]:
    """Every string of ``config`` (keys and values, at any depth) that looks like a secret, and with
    ``by_name`` every string value of a secret-named key (``name``: the key ``config`` is under).

    A whole config is searched without ``by_name``: a message about another key may quote a
    secret-named key's legitimate value (the default ``api_key_env: OPENAI_API_KEY``). The
    value a schema error is about is searched with it."""
    found: set[str] = set()
    if isinstance(config, Mapping):
        for key, value in config.items():
            if looks_like_secret(key):
                found.add(key)
            found |= config_secrets(value, key, by_name=by_name)
    elif isinstance(config, (list, tuple)):
        for item in config:
            found |= config_secrets(item, name, by_name=by_name)
    elif isinstance(config, str) and config and ((by_name and is_secret_name(name)) or looks_like_secret(config)):
        found.add(config)
    return found


def masked_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with each of ``secrets`` (as written, and as ``repr`` escapes it) and anything of a
    key's shape replaced by :func:`mask`."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        for form in {secret, repr(secret)[1:-1]}:
            text = text.replace(form, mask(secret))
    return _KEY_SHAPES.sub(lambda m: mask(m.group(0)), text)


def api_key_env_problem(path: str, value: object) -> str:
    """The one-line problem with an ``api_key_env`` value that is not an environment variable's name."""
    if looks_like_secret(value):
        return (f"{path}: api_key_env names an environment variable, not the key itself; put the key in a "
                f"variable (e.g. export OPENAI_API_KEY=...) and write its name here (the value is not shown)")
    shown = mask(value) if isinstance(value, str) else type(value).__name__
    return (f"{path}: {shown} is not the name of an environment variable (capitals, digits and '_', "
            f"e.g. OPENAI_API_KEY)")


def is_env_name(value: object) -> bool:
    return isinstance(value, str) and bool(_ENV_NAME.fullmatch(value))


__all__ = ["SECRET_NAME_PARTS", "api_key_env_problem", "config_secrets", "is_env_name", "is_secret_name",
           "looks_like_secret", "mask", "masked_text"]
