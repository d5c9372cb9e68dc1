"""tiktoken-style BPE rank tables to Hugging Face fast tokenizers, offline.

A rank table maps each token's bytes to its id, and the id is also the merge
priority: tiktoken repeatedly merges the adjacent pair whose concatenation has
the lowest rank. A Hugging Face ``BPE`` model reproduces that when every split
``(left, right)`` of a token gets the token's rank as its merge priority, and
``ignore_merges=True`` lets whole words found in the vocabulary win outright, as
in tiktoken. Tokens are spelled with GPT-2's byte-to-unicode alphabet.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from genlm_assets._convert.hfdir import save_tokenizer

__all__ = [
    "GPT2_PATTERN",
    "LLAMA3_PATTERN",
    "QWEN_PATTERN",
    "llama3_special_tokens",
    "qwen_special_tokens",
    "read_js_tiktoken",
    "read_tiktoken",
    "save_rank_tokenizer",
]

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

_LLAMA3_NAMED = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|step_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
)


def llama3_special_tokens(n_ranks: int) -> dict[str, int]:
    """Meta's 256 Llama-3 special tokens, numbered right after the ranks."""
    names = list(_LLAMA3_NAMED)
    names += [f"<|reserved_special_token_{i}|>" for i in range(2, 2 + 256 - len(names))]
    return {name: n_ranks + i for i, name in enumerate(names)}


def qwen_special_tokens() -> dict[str, int]:
    """Qwen's 208 special tokens (``<|endoftext|>``, chat markers, 205 extras) from id 151643."""
    names = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    names += [f"<|extra_{i}|>" for i in range(205)]
    return {name: 151643 + i for i, name in enumerate(names)}


def read_tiktoken(path: Path) -> dict[bytes, int]:
    """Read a plain tiktoken file: one ``<base64 token> <rank>`` pair per line."""
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def read_js_tiktoken(path: Path) -> tuple[dict[bytes, int], str, dict[str, int]]:
    """Read a ``js-tiktoken`` ``dist/ranks/*.js`` module.

    The module is ``export default {...}``; its ``bpe_ranks`` string holds lines of
    ``<tag> <first rank> <base64 token> <base64 token> ...`` with consecutive ranks.

    Returns:
        ``(ranks, pattern, special_tokens)``.
    """
    source = path.read_text(encoding="utf-8")
    data = json.loads(source[source.index("{") : source.rindex("}") + 1])
    ranks: dict[bytes, int] = {}
    for line in data["bpe_ranks"].split("\n"):
        if line:
            _, first, *tokens = line.split(" ")
            for offset, token in enumerate(tokens):
                ranks[base64.b64decode(token)] = int(first) + offset
    return ranks, data["pat_str"], data["special_tokens"]


def _byte_alphabet() -> list[str]:
    """GPT-2's reversible byte-to-printable-unicode map, indexed by byte value."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    alphabet = [""] * 256
    extra = 0
    for b in range(256):
        if b in printable:
            alphabet[b] = chr(b)
        else:
            alphabet[b] = chr(256 + extra)
            extra += 1
    return alphabet


def _merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Every split of every token into two tokens, by (token rank, left rank, right rank)."""
    found = []
    for token, rank in ranks.items():
        for i in range(1, len(token)):
            left = ranks.get(token[:i])
            if left is not None:
                right = ranks.get(token[i:])
                if right is not None:
                    found.append((rank, left, right, token[:i], token[i:]))
    found.sort(key=lambda m: m[:3])
    return [(m[3], m[4]) for m in found]


def rank_tokenizer(ranks: dict[bytes, int], pattern: str, special_tokens: dict[str, int]) -> Any:
    """Build a ``tokenizers.Tokenizer`` equivalent to the tiktoken encoding.

    Special tokens keep their real ids, so vocabularies with holes in the id space
    (cl100k, o200k) stay faithful.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import BPE

    alphabet = _byte_alphabet()

    def spell(token: bytes) -> str:
        return "".join(alphabet[b] for b in token)

    vocab = {spell(token): rank for token, rank in ranks.items()}
    merges = [(spell(a), spell(b)) for a, b in _merges(ranks)]
    vocab.update(special_tokens)
    tokenizer = Tokenizer(BPE(vocab, merges, fuse_unk=False, ignore_merges=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    ordered = sorted(special_tokens, key=special_tokens.__getitem__)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ordered])
    return tokenizer


def save_rank_tokenizer(
    ranks: dict[bytes, int],
    pattern: str,
    special_tokens: dict[str, int],
    out: Path,
    **named_tokens: str,
) -> None:
    """Convert a rank table and save it as a portable HF tokenizer dir.

    Args:
        ranks: Token bytes to id.
        pattern: The pre-tokenization regex (tiktoken's ``pat_str``).
        special_tokens: Special token text to id.
        out: Directory to write.
        **named_tokens: ``bos_token``, ``eos_token``, ... for the tokenizer config.
    """
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=rank_tokenizer(ranks, pattern, special_tokens),
        clean_up_tokenization_spaces=False,
        **named_tokens,
    )
    save_tokenizer(tokenizer, out)
