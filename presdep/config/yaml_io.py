"""YAML files of the project, read one way: strictly, and a mapping at the top level or a clear error.

PyYAML's ``safe_load`` keeps the LAST of two equal keys in one mapping without a word (a
repeated ``task:`` once turned a rerank dataset into QA). :class:`StrictLoader` refuses it,
naming the file, the key and both lines. YAML merge keys (``<<: *anchor``) keep working: a
key written next to a merge overrides the merged one, as YAML defines, and is no duplicate.
Every YAML the project reads goes through :func:`parse_yaml` or :func:`load_yaml`.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any, NoReturn

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from presdep.contracts.errors import ConfigError, InputFormatError
from presdep.runtime.text_files import read_text_file

_MERGE_TAG = "tag:yaml.org,2002:merge"
_VALUE_TAG = "tag:yaml.org,2002:value"


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (merge keys aside).

    ``source`` names the file in the error; it defaults to the stream's own name. Merge keys
    follow the YAML merge spec: an explicit key overrides a merged one, and of the mappings in
    ``<<: [*a, *b]`` the earlier wins (also when a merged mapping has merges of its own, where
    PyYAML 6's flattening keeps the wrong value).
    """

    source: str | None = None

    def flatten_mapping(self, node: MappingNode) -> None:
        flattened = self.__dict__.setdefault("_strict_flattened", set())
        if id(node) in flattened:  # a shared anchored mapping: already flat and checked
            return
        flattened.add(id(node))
        explicit, sources, merge_keys = [], [], []
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                if key_node.tag == _VALUE_TAG:
                    key_node.tag = "tag:yaml.org,2002:str"
                explicit.append((key_node, value_node))
                continue
            merge_keys.append(key_node)
            subnodes = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
            for sub in subnodes:
                if not isinstance(sub, MappingNode):
                    raise ConstructorError("while constructing a mapping", node.start_mark,
                                           f"expected a mapping or list of mappings for merging, but found {sub.id}",
                                           sub.start_mark)
                sources.append(sub)
        if len(merge_keys) > 1:
            self._duplicate("<<", merge_keys[0], merge_keys[1])
        seen: dict[Any, Node] = {}
        for key_node, _ in explicit:
            first = seen.setdefault(self._key(key_node), key_node)
            if first is not key_node:
                self._duplicate(self.construct_object(key_node), first, key_node)
        # One pair per key, in PyYAML's order (merged keys first); the winner's value.
        pairs: dict[Any, tuple[Node, Node]] = {}
        for sub in sources:
            self.flatten_mapping(sub)
            for pair in sub.value:
                pairs.setdefault(self._key(pair[0]), pair)
        for pair in explicit:
            pairs[self._key(pair[0])] = pair
        node.value = list(pairs.values())

    def _key(self, key_node: Node) -> Any:
        """What a key node compares by: its value for a scalar, else the node itself."""
        if isinstance(key_node, ScalarNode):
            key = self.construct_object(key_node)
            try:
                hash(key)
                return key
            except TypeError:
                pass
        return ("node", id(key_node))

    def _duplicate(self, key: Any, first: Node, second: Node) -> NoReturn:
        raise InputFormatError(
            self.source or first.start_mark.name,
            f"line {first.start_mark.line + 1} and line {second.start_mark.line + 1}",
            f"key {key!r} appears twice in one mapping",
        )


def parse_yaml(stream: str | bytes | IO, source: str | Path | None = None) -> Any:
    """One YAML document read strictly (see :class:`StrictLoader`); ``source`` names it in errors."""
    loader = StrictLoader(stream)
    loader.source = None if source is None else str(source)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load_yaml(path: str | Path) -> dict:
    data = parse_yaml(read_text_file(path), path) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data
