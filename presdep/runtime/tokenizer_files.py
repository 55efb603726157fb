"""A chat tokenizer read from its files with ``tokenizers`` and ``jinja2`` alone.

A score job whose every prompt is in the read cache needs the prompts' token ids and nothing
else of the model, but transformers' tokenizer classes import torch (seconds per job).

The files alone prove nothing: ``AutoTokenizer`` picks its class by the model's type, and a
model-specific class (Qwen2Tokenizer, ...) rebuilds the backend from the file's vocabulary with
its own pipeline, which may differ from the file's. So :func:`write_check`, run where
transformers has the tokenizer loaded (a model fetch), records whether the backend
``AutoTokenizer`` built serialises exactly as the file does, with the special tokens it named;
:func:`file_tokenizer` reads the files only where such a record holds for these files and the
installed transformers. Elsewhere jobs load the tokenizer through transformers, as before.

The chat template is rendered as transformers renders it: a sandboxed Jinja environment with
``trim_blocks`` and ``lstrip_blocks``, loop controls, a ``tojson`` that keeps non-ASCII text,
``raise_exception``, ``strftime_now``, the special tokens' texts and the caller's keywords.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, Sequence

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
# The check record beside them; no .json suffix, so a directory's weights digest never includes it.
CHECK_FILE = ".presdep-tokenizer-check"


def _chat_template(directory: Path, config: Mapping[str, Any]) -> str | None:
    """chat_template.jinja beside the tokenizer, else the config's template (a named list's default)."""
    file = directory / "chat_template.jinja"
    if file.is_file():
        return file.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
        return named.get("default")
    return template


def _digests(d: Path) -> dict[str, str | None]:
    """sha256 of each file the tokenizer is read from (None: absent)."""
    from presdep.runtime.hashing import sha256_file

    return {name: (sha256_file(d / name) if (d / name).is_file() else None) for name in TOKENIZER_FILES}


def _transformers_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("transformers")
    except PackageNotFoundError:
        return None


def write_check(directory: str | Path, tokenizer: Any) -> dict:
    """Record in ``directory`` whether ``tokenizer`` (transformers', loaded from it) encodes as its
    tokenizer.json does: the backend it built serialises exactly as the file and does not split
    special tokens, and its chat template is the one the files give. Returns the record."""
    from tokenizers import Tokenizer

    d = Path(directory)
    config = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    backend = getattr(tokenizer, "backend_tokenizer", None)
    same = (backend is not None and not backend.encode_special_tokens
            and backend.to_str() == Tokenizer.from_file(str(d / "tokenizer.json")).to_str()
            and getattr(tokenizer, "chat_template", None) == _chat_template(d, config))
    record = {"transformers": _transformers_version(), "files": _digests(d), "same_ids": bool(same),
              "tokenizer_class": type(tokenizer).__name__,
              "special_tokens_map": dict(tokenizer.special_tokens_map),
              "pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    tmp = d / (CHECK_FILE + ".tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(d / CHECK_FILE)
    return record


def _valid_check(d: Path) -> dict | None:
    """The directory's check record where it is of these files and this transformers version."""
    path = d / CHECK_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (not isinstance(record, dict) or not isinstance(record.get("same_ids"), bool)
            or record.get("transformers") != _transformers_version() or record.get("files") != _digests(d)):
        return None
    return record


def file_tokenizer(directory: str | Path) -> "FileTokenizer | None":
    """The tokenizer in ``directory`` read from its files, where its check record (:func:`write_check`,
    of these files and this transformers version) says transformers gives the same ids; else None."""
    d = Path(directory)
    check = _valid_check(d)
    if check is None or not check["same_ids"]:
        return None
    from tokenizers import Tokenizer

    config = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    return FileTokenizer(d, config, Tokenizer.from_file(str(d / "tokenizer.json")), check)


class FileTokenizer:
    """What prompt building asks of a tokenizer: ``encode``, ``apply_chat_template``, the chat
    template, the pad and end-of-text ids, and the name it was loaded from."""

    def __init__(self, directory: Path, config: Mapping[str, Any], backend: Any, check: Mapping[str, Any]):
        self.name_or_path = str(directory)
        self.backend = backend
        self.chat_template = _chat_template(directory, config)
        self._compiled: Any = None
        # What transformers named: a class may default a token its config omits.
        self.special_tokens_map = dict(check["special_tokens_map"])
        self.pad_token_id, self.eos_token_id = check["pad_token_id"], check["eos_token_id"]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if add_special_tokens:
            # transformers may rebuild the post-processor that adds them; prompts never ask for it.
            raise ValueError("a FileTokenizer encodes without added special tokens (add_special_tokens=False); "
                             "the chat template writes them")
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def apply_chat_template(self, conversation: Sequence[Mapping[str, Any]], *, tokenize: bool = True,
                            add_generation_prompt: bool = False, **kwargs: Any) -> str | list[int]:
        if self.chat_template is None:
            raise ValueError(f"tokenizer {self.name_or_path!r} has no chat template")
        if self._compiled is None:
            self._compiled = _compile(self.chat_template)
        text = self._compiled.render(messages=[dict(m) for m in conversation], tools=None, documents=None,
                                     add_generation_prompt=add_generation_prompt,
                                     **{**self.special_tokens_map, **kwargs})
        return self.encode(text, add_special_tokens=False) if tokenize else text


def _compile(template: str) -> Any:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}`` marks assistant text; rendered as its body."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)
