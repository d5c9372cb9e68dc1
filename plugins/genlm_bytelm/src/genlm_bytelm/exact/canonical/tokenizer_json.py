"""A tokenizer's ``tokenizer.json``, read without holding the GIL for long.

``Tokenizer.to_str()`` and ``json.loads`` each hold the GIL for a tenth of a second or
more; when the file the tokenizer was loaded from still [`describes`][] it, the file
is read and parsed item by item instead (docs/bytes-design.md, *The event loop*).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

__all__ = ["describes", "loaded_file", "loads_in_pieces", "read_tokenizer_json"]

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODE = json.JSONDecoder().raw_decode
#: Components compared between the file and the tokenizer in memory.
_COMPONENTS = ("normalizer", "pre_tokenizer", "decoder", "post_processor")
#: BPE options compared (attribute of ``tokenizers.models.BPE`` = key of the file's model).
_MODEL_OPTIONS = (
    "byte_fallback",
    "continuing_subword_prefix",
    "dropout",
    "end_of_word_suffix",
    "ignore_merges",
)
#: Vocabulary entries whose ids are compared, spread over the vocabulary.
_SAMPLED_TOKENS = 4096


def read_tokenizer_json(tokenizer: Any, backend: Any) -> dict[str, Any]:
    """``tokenizer``'s ``tokenizer.json`` as a dict: from its file when that is safe."""
    path = loaded_file(tokenizer)
    if path is not None:
        try:
            config = loads_in_pieces(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            config = None
        if isinstance(config, dict) and describes(config, backend):
            return config
    return json.loads(backend.to_str())


def loaded_file(tokenizer: Any) -> Path | None:
    """The ``tokenizer.json`` ``tokenizer`` was loaded from, if it is on disk (or None)."""
    source = getattr(tokenizer, "name_or_path", None)
    if not isinstance(source, str) or not source:
        return None
    local = Path(source) / "tokenizer.json"
    if local.is_file():
        return local
    try:  # a hub id: the file in the local hub cache, without asking the hub
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(source, "tokenizer.json")
    except Exception:  # noqa: BLE001 - not a repo id, or no hub client: use to_str()
        return None
    return Path(cached) if isinstance(cached, str) and Path(cached).is_file() else None


def describes(config: dict[str, Any], backend: Any) -> bool:
    """Whether the parsed ``config`` is the tokenizer ``backend`` holds in memory.

    All but the merges are compared (reading them back is the long call avoided).
    """
    try:
        for name in _COMPONENTS:
            part = getattr(backend, name)
            if (json.loads(part.__getstate__()) if part is not None else None) != config.get(name):
                return False
        model = config.get("model") or {}
        if model.get("type") != type(backend.model).__name__:
            return False
        for option in _MODEL_OPTIONS:
            if (getattr(backend.model, option, None) or None) != (model.get(option) or None):
                return False
        vocab = model.get("vocab")
        if not isinstance(vocab, dict):
            return False
        if backend.get_vocab_size(with_added_tokens=False) != len(vocab):
            return False
        entries = list(vocab.items())
        step = max(1, len(entries) // _SAMPLED_TOKENS)
        token_to_id = backend.model.token_to_id
        if any(token_to_id(token) != i for token, i in entries[::step]):
            return False
        added = {t.get("id"): t.get("content") for t in config.get("added_tokens") or []}
        in_memory = {i: t.content for i, t in backend.get_added_tokens_decoder().items()}
        return added == in_memory
    except Exception:  # noqa: BLE001 - an unexpected layout: read it from memory instead
        return False


def loads_in_pieces(text: str, depth: int = 3) -> Any:
    """``json.loads(text)``, parsing ``depth`` levels item by item.

    Each item is a short C call, so other threads get the GIL between them.
    """
    skip = _WHITESPACE.match

    def value(i: int, levels: int) -> tuple[Any, int]:
        i = skip(text, i).end()
        opening = text[i : i + 1]
        if levels == 0 or opening not in ("[", "{"):
            return _DECODE(text, i)
        closing = "]" if opening == "[" else "}"
        items: Any = [] if opening == "[" else {}
        i = skip(text, i + 1).end()
        if text[i : i + 1] == closing:
            return items, i + 1
        while True:
            if opening == "[":
                item, i = value(i, levels - 1)
                items.append(item)
            else:
                key, i = _DECODE(text, i)
                if not isinstance(key, str):
                    raise json.JSONDecodeError("Expecting property name", text, i)
                i = skip(text, i).end()
                if text[i : i + 1] != ":":
                    raise json.JSONDecodeError("Expecting ':' delimiter", text, i)
                items[key], i = value(i + 1, levels - 1)
            i = skip(text, i).end()
            separator = text[i : i + 1]
            if separator == ",":
                i = skip(text, i + 1).end()
            elif separator == closing:
                return items, i + 1
            else:
                raise json.JSONDecodeError(f"Expecting ',' or {closing!r}", text, i)

    parsed, end = value(0, depth)
    if skip(text, end).end() != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return parsed
