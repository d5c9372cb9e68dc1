"""The tokenizer's added-token split, emulated on bytes: where it cuts a text before BPE.

``tokenizers`` finds its added tokens' contents in a text before normalizing and
pre-tokenizing it (``AddedVocabulary.extract_and_normalize``): a leftmost-longest,
non-overlapping scan (Aho-Corasick) over the contents of the tokens with
``normalized=False``, then the same over the pieces left, with the ``normalized=True``
ones. A match of a special token's content is left in the text (special tokens are
text to the exact state: ``encode_special_tokens``, docs/bytes.md *Added tokens*) but
still consumes its span, as the scan does. Checked against the tokenizer itself
in ``tests/bytelm/test_added_tokens.py``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["AddedSplit", "Content", "Region"]


class Content(NamedTuple):
    """One added token's content, as matched: ``split`` False for a special token's."""

    data: bytes
    id: int
    split: bool
    lstrip: bool
    rstrip: bool


class Region(NamedTuple):
    """A match of the scan: ``[start, end)`` of ``content`` (by pass, 1 or 2)."""

    start: int
    end: int
    content: Content
    stage: int


class _Pass:
    """One leftmost-longest scan over a set of contents."""

    def __init__(self, contents: list[Content]) -> None:
        self.by_data = {c.data: c for c in contents}
        self.lengths = sorted({len(c.data) for c in contents}, reverse=True)
        self.first_bytes = frozenset(c.data[0] for c in contents)
        self.longest = max(self.lengths, default=0)

    def scan(self, text: bytes, lo: int, hi: int) -> list[tuple[int, int, Content]]:
        """Matches in ``text[lo:hi]``: at the leftmost start, the longest content."""
        out = []
        i, first, by_data, lengths = lo, self.first_bytes, self.by_data, self.lengths
        while i < hi:
            if text[i] in first:
                for size in lengths:
                    if i + size <= hi:
                        found = by_data.get(text[i : i + size])
                        if found is not None:
                            out.append((i, i + size, found))
                            i += size
                            break
                else:
                    i += 1
            else:
                i += 1
        return out


class AddedSplit:
    """The tokenizer's cuts of a text by added-token contents (see module doc)."""

    def __init__(self, first: list[Content], second: list[Content]) -> None:
        self.passes = [_Pass(first)] + ([_Pass(second)] if second else [])
        contents = [*first, *second]
        #: The bytes a content starts with: a match can start nowhere else.
        self.first_bytes = frozenset(c.data[0] for c in contents)
        self.longest = max((len(c.data) for c in contents), default=0)
        #: Proper prefixes of the contents -> the contents they start (for open matches).
        self.starting: dict[bytes, list[Content]] = {}
        for c in contents:
            for k in range(1, len(c.data)):
                self.starting.setdefault(c.data[:k], []).append(c)

    def regions(self, text: bytes) -> list[Region]:
        """Every match of the two passes over ``text`` (as if it ended there), by start."""
        first = [Region(s, e, c, 1) for s, e, c in self.passes[0].scan(text, 0, len(text))]
        if len(self.passes) == 1:
            return first
        out, lo = list(first), 0
        for region in [*(r for r in first if r.content.split), None]:
            hi = len(text) if region is None else region.start
            out += [Region(s, e, c, 2) for s, e, c in self.passes[1].scan(text, lo, hi)]
            if region is not None:
                lo = region.end
        return sorted(out)

    def cuts(self, text: bytes) -> list[tuple[int, int, int]]:
        """The added tokens the tokenizer emits for ``text``: ``(start, end, id)``."""
        return [(r.start, r.end, r.content.id) for r in self.regions(text) if r.content.split]

    def open_matches(self, text: bytes, regions: list[Region]) -> list[tuple[int, Content]]:
        """``(start, content)`` of contents a longer text could still complete.

        Starts inside a match (which the scan steps over) are left out.
        """
        out = []
        for p in range(max(0, len(text) - self.longest + 1), len(text)):
            contents = self.starting.get(text[p:])
            if contents and not any(r.start < p < r.end for r in regions):
                out += [(p, c) for c in contents]
        return out

    def settled_start(self, text: bytes, regions: list[Region]) -> int:
        """Where the text stops being settled: the scan from there on equals the scan of all.

        Before it, no content can start a match that a longer text completes, and no
        match crosses it (``len(text)`` when the whole text is settled).
        """
        start = next(
            (
                p
                for p in range(max(0, len(text) - self.longest + 1), len(text))
                if text[p:] in self.starting
            ),
            len(text),
        )
        moved = True
        while moved:
            moved = False
            for r in regions:
                if r.start < start < r.end:
                    start, moved = r.start, True
        return start


def read_added(
    backend: Any, byte_vocab: list[bytes], writable: Any, plain_normalizer: bool
) -> tuple[AddedSplit, dict[int, Content]]:
    """The split of ``backend`` (a ``tokenizers.Tokenizer``) and its added tokens by id.

    ``writable(content)``: whether a text the byte-level LM reads can hold ``content``
    (False: the content never matches, e.g. Gemma's runs of a literal ``▁``);
    ``plain_normalizer``: the tokenizer has no normalizer that changes text (then the
    second pass matches contents as they are). Returns the split and ``{id: Content}``
    of the tokens the split emits (never the special ones).

    Raises:
        ValueError: A flag or combination the emulation does not cover (the message names it).
    """
    first: list[Content] = []
    second: list[Content] = []
    emitted: dict[int, Content] = {}
    for i, token in sorted(backend.get_added_tokens_decoder().items()):
        content = token.content
        if not content or not writable(content):
            continue
        data = content.encode("utf-8")
        split = not token.special
        if split and token.single_word:
            raise ValueError(f"added token {content!r} has single_word=True")
        if (
            split
            and (token.lstrip or token.rstrip)
            and (content[0].isspace() or content[-1].isspace())
        ):
            raise ValueError(f"added token {content!r} strips whitespace and holds some itself")
        if split and i < len(byte_vocab) and bytes(byte_vocab[i]) != data:
            raise ValueError(
                f"added token {content!r} spells {bytes(byte_vocab[i])!r}, not its content"
            )
        entry = Content(data, int(i), split, bool(token.lstrip), bool(token.rstrip))
        if token.normalized:
            if not plain_normalizer:
                raise ValueError(
                    f"added token {content!r} is matched after the normalizer (normalized=True)"
                )
            second.append(entry)
        else:
            first.append(entry)
        if split:
            emitted[int(i)] = entry
    return AddedSplit(first, second), emitted
