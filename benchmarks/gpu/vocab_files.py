"""The GPU benchmarks' vocabulary files: decoded vocabularies carried to a machine
without tokenizers or network (``bench_trie_gpu.py --dump-vocabs`` / ``--vocab-dir``)."""

from __future__ import annotations

import hashlib
import json
import lzma
from pathlib import Path

import numpy as np

VOCABS = {"gpt2": "gpt2-npm", "llama3": "llama3", "gemma3": "gemma3"}
MAGIC = b"genlm-core vocabulary 1\n"


def write_vocab(path: Path, name: str, asset: str, words: list[bytes]) -> None:
    """lzma(MAGIC, a JSON header line, every length (1 or 2 bytes), the bytes)."""
    blob = b"".join(words)
    lengths = np.array([len(w) for w in words], dtype="<u2")
    width = 1 if lengths.max(initial=0) < 256 else 2
    digest = hashlib.sha256(lengths.tobytes() + blob).hexdigest()
    header = {"name": name, "asset": asset, "count": len(words), "width": width, "sha256": digest}
    raw = MAGIC + json.dumps(header).encode() + b"\n"
    raw += lengths.astype(np.uint8 if width == 1 else "<u2").tobytes() + blob
    path.write_bytes(lzma.compress(raw, preset=9 | lzma.PRESET_EXTREME))


def read_vocab(path: Path) -> list[bytes]:
    raw = lzma.decompress(path.read_bytes())
    if not raw.startswith(MAGIC):
        raise ValueError(f"{path} is not a vocabulary written by --dump-vocabs")
    end = raw.index(b"\n", len(MAGIC))
    header = json.loads(raw[len(MAGIC) : end])
    n, width = header["count"], header["width"]
    lengths = np.frombuffer(raw, np.uint8 if width == 1 else "<u2", n, end + 1).astype("<u2")
    blob = raw[end + 1 + n * width :]
    if hashlib.sha256(lengths.tobytes() + blob).hexdigest() != header["sha256"]:
        raise ValueError(f"{path}: checksum mismatch")
    ends = np.cumsum(lengths, dtype=np.int64).tolist()
    return [blob[s:e] for s, e in zip([0, *ends[:-1]], ends, strict=True)]


def decoded_words(asset: str) -> list[bytes]:
    from transformers import AutoTokenizer

    from genlm_assets import tokenizer_dir
    from genlm_core.tokenization import decode_vocab

    byte_vocab, _ = decode_vocab(AutoTokenizer.from_pretrained(tokenizer_dir(asset)))
    assert all(t.token_id == i for i, t in enumerate(byte_vocab)), "ids are not positions"
    return [bytes(t) for t in byte_vocab]


def dump_vocabs(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    total = 0
    for name, asset in VOCABS.items():
        words = decoded_words(asset)
        path = out / f"{name}.vocab.xz"
        write_vocab(path, name, asset, words)
        assert read_vocab(path) == words
        total += path.stat().st_size
        print(f"{path}: {len(words)} tokens, {sum(map(len, words))} bytes -> ", end="")
        print(f"{path.stat().st_size / 1e6:.2f} MB")
    print(f"total {total / 1e6:.2f} MB")


def make_decode(words: list[bytes]) -> list:
    """genlm-backend Tokens (id = position): Gemma-3 spells 110 byte strings twice, and
    genlm-backend rejects equal plain bytes."""
    try:
        from genlm.backend.tokenization import Token
    except ImportError:
        from genlm_core.tokenization import Token
    return [Token(i, w) for i, w in enumerate(words)]
