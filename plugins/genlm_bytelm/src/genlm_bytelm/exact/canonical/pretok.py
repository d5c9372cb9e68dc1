r"""The tokenizer's pre-tokenizer, emulated, and the character classes it can tell apart.

Characters the regexes cannot tell apart share a class, so boundaries are computed per
class string, a few hundred regex runs (docs/bytes-design.md, *How the filter computes it*).
The emulation is checked against the tokenizer's ``pre_tokenize_str`` when built.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import regex

from genlm_bytelm.errors import CanonicalityUnsupportedError

__all__ = ["PROBE_CHARS", "CharClasses", "Pretokenizer", "parse_pattern", "verification_texts"]

_NUMERIC = regex.compile(r"\p{N}")
_ESCAPED_LITERALS = {"r": "\r", "n": "\n", "t": "\t", "f": "\f", "v": "\v", "0": "\0"}


class _Pattern:
    """Atoms (character tests) and literal sequences of one regex."""

    def __init__(self) -> None:
        self.atoms: list[str] = []  # regex sources matching one character
        self.sequences: list[list[str]] = []  # runs of consecutive literal characters
        self.lookahead = 1  # how far past a match the pattern may look (characters)


def parse_pattern(pattern: str) -> _Pattern:
    r"""The character tests and literal sequences of a regex; anchors and look-behinds raise."""
    out = _Pattern()
    run: list[str] = []
    flags: list[bool] = [False]  # case-insensitive, per open group
    i, n = 0, len(pattern)

    def end_run() -> None:
        if run:
            out.sequences.append(list(run))
            run.clear()

    def literal(ch: str) -> None:
        source = regex.escape(ch)
        out.atoms.append(f"(?i:{source})" if flags[-1] else source)
        run.append(ch.casefold() if flags[-1] else ch)

    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1]
            if nxt in "pP" and pattern[i + 2] == "{":
                close = pattern.index("}", i)
                out.atoms.append(pattern[i : close + 1])
                end_run()
                i = close + 1
                continue
            if nxt in "sSdDwW":
                out.atoms.append(pattern[i : i + 2])
                end_run()
            elif nxt in _ESCAPED_LITERALS:
                literal(_ESCAPED_LITERALS[nxt])
            elif nxt.isalnum():
                raise ValueError(f"unsupported escape \\{nxt} in pre-tokenizer regex {pattern!r}")
            else:
                literal(nxt)
            i += 2
        elif c == "[":
            j = i + 1
            if pattern[j : j + 1] == "^":
                j += 1
            if pattern[j : j + 1] == "]":
                j += 1
            while pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            out.atoms.append(pattern[i : j + 1])
            end_run()
            i = j + 1
        elif c == "(":
            end_run()
            if pattern.startswith("(?<", i) and not pattern.startswith("(?<P", i):
                raise ValueError(f"look-behind in pre-tokenizer regex {pattern!r}")
            if pattern.startswith("(?", i):
                j = i + 2
                while pattern[j] not in ":)=!":
                    j += 1
                mode = pattern[i + 2 : j]
                flags.append(flags[-1] or "i" in mode)
                i = j + 1
            else:
                flags.append(flags[-1])
                i += 1
        elif c == ")":
            end_run()
            flags.pop()
            i += 1
        elif c == "{":
            close = pattern.index("}", i)
            bounds = [int(x) for x in pattern[i + 1 : close].split(",") if x.strip()]
            out.lookahead = max(out.lookahead, *bounds)
            if run:
                run.pop()  # a quantified literal is not part of a fixed sequence
            end_run()
            i = close + 1
        elif c in "?*+":
            if run:
                run.pop()
            end_run()
            i += 1
        elif c == "|":
            end_run()
            i += 1
        elif c == ".":
            out.atoms.append(".")
            end_run()
            i += 1
        elif c in "^$":
            raise ValueError(f"anchor {c!r} in pre-tokenizer regex {pattern!r}")
        else:
            literal(c)
            i += 1
    end_run()
    longest = max((len(s) for s in out.sequences), default=1)
    out.lookahead = max(out.lookahead, longest)
    return out


class CharClasses:
    r"""Characters grouped by what the pre-tokenizer regexes (and a ``Digits`` step) tell apart."""

    def __init__(self, patterns: Sequence[_Pattern], digits: bool) -> None:
        sources = list(dict.fromkeys(a for p in patterns for a in p.atoms))
        if digits:
            sources.append(r"\p{N}")
        self._atoms = [regex.compile(a) for a in sources]
        literal_ids = {
            k for k, a in enumerate(sources) if not a.startswith(("\\p", "\\P", "[", "\\s", "\\S"))
        }
        literal_ids -= {k for k, a in enumerate(sources) if a in (".", "\\d", "\\D", "\\w", "\\W")}
        self._collapsible, self.context_chars, self.reach = _collapsible(
            patterns, sources, literal_ids
        )
        self.frozen = False
        self._signatures: dict[tuple[bool, ...], int] = {}
        self._of: dict[str, int] = {}
        self._base: dict[int, int] = {}  # class -> the class it has out of context
        self.reps: list[str] = []

    def enumerate_all(self) -> None:
        """Find every class now (planes 0-2, samples beyond); a new class met later raises."""
        chars = [chr(c) for c in range(0x30000) if not 0xD800 <= c < 0xE000]
        chars += [chr(c) for c in (*range(0xE0000, 0xE0080), 0xF0000, 0x10FFFD)]
        text = "".join(chars)
        member = []
        for atom in self._atoms:
            hits = np.zeros(len(chars), dtype=bool)
            hits[[m.start() for m in atom.finditer(text)]] = True
            member.append(hits)
        signatures = np.stack(member, axis=1) if member else np.zeros((len(chars), 0), bool)
        first = _first_of_each_row(signatures)
        ascii_first = {}
        for i in range(0x80):
            ascii_first.setdefault(signatures[i].tobytes(), i)
        for i in sorted(first.tolist()):
            self.of(chars[ascii_first.get(signatures[i].tobytes(), i)])
        self.frozen = True

    def of(self, ch: str, in_context: bool = True) -> int:
        """The class of character ``ch``; out of context, contraction letters are letters."""
        k = self._of.get(ch)
        if k is None:
            k = self._of[ch] = self._class(tuple(bool(a.fullmatch(ch)) for a in self._atoms), ch)
            if self._collapsible:
                base = tuple(
                    False if j in self._collapsible else bool(a.fullmatch(ch))
                    for j, a in enumerate(self._atoms)
                )
                self._base[k] = self._class(base, None)
        return k if in_context else self._base.get(k, k)

    def _class(self, signature: tuple[bool, ...], ch: str | None) -> int:
        k = self._signatures.get(signature)
        if k is None and self.frozen:
            raise CanonicalityUnsupportedError(
                f"character {ch!r} has a pre-tokenizer class not met among planes 0-2 "
                f"(signature {signature}); exact byte probabilities cannot be computed"
            )
        if k is None:
            k = self._signatures[signature] = len(self.reps)
            rep = ch if ch is not None else self._find_rep(signature)
            self.reps.append(rep)
        elif ch is not None and ord(ch) < 128 and ord(self.reps[k]) >= 128:
            self.reps[k] = ch  # prefer ASCII representatives (both regex engines agree there)
        return k

    def _find_rep(self, signature: tuple[bool, ...]) -> str:
        for ch in (*map(chr, range(32, 127)), *self._of):
            if tuple(bool(a.fullmatch(ch)) for a in self._atoms) == signature:
                return ch
        raise CanonicalityUnsupportedError(
            f"no character has the pre-tokenizer class {signature} (internal error)"
        )

    def string(self, text: str, head: int = 0) -> tuple[int, ...]:
        """Class ids of ``text``'s characters.

        A contraction letter keeps its class only within ``reach`` characters after the
        apostrophe, or within the first ``head`` characters.
        """
        if not self._collapsible:
            return tuple(self.of(ch) for ch in text)
        out = []
        last_context = -(10**9)
        for i, ch in enumerate(text):
            keep = i < head or i - last_context <= self.reach
            out.append(self.of(ch, keep))
            if ch.casefold() in self.context_chars or ch in self.context_chars:
                last_context = i
        return tuple(out)

    def text(self, classes: Iterable[int]) -> str:
        """A text with these character classes (each class's representative)."""
        return "".join(self.reps[k] for k in classes)


def _collapsible(
    patterns: Sequence[_Pattern], sources: list[str], literal_ids: set[int]
) -> tuple[set[int], set[str], int]:
    """Literal atoms only seen right after one context literal: ``(atom ids, context, reach)``."""
    seen: dict[str, set[tuple[str, int]]] = {}
    for p in patterns:
        for seq in p.sequences:
            for idx, ch in enumerate(seq):
                seen.setdefault(ch, set()).add((seq[0], idx))
    collapsible, context, reach = set(), set(), 0
    for k in literal_ids:
        src = sources[k]
        ch = regex.sub(r"^\(\?i:(.*)\)$", r"\1", src)
        ch = ch[1:] if ch.startswith("\\") else ch
        places = seen.get(ch) or seen.get(ch.casefold())
        if not places or any(idx == 0 for _, idx in places):
            continue
        heads = {head for head, _ in places}
        if len(heads) != 1:
            continue
        collapsible.add(k)
        context |= heads
        reach = max(reach, *(idx for _, idx in places))
    # a context literal must itself stay distinct
    for k in list(collapsible):
        ch = regex.sub(r"^\(\?i:(.*)\)$", r"\1", sources[k])
        if ch in context:
            collapsible.discard(k)
    return collapsible, context, reach


class Pretokenizer:
    """The tokenizer's pre-tokenization of a text, as the boundaries between pre-tokens."""

    def __init__(self, splits: Sequence[tuple[str, Any]]) -> None:
        self.steps: list[tuple[str, Any]] = []
        parsed = []
        digits = False
        for kind, arg in splits:
            if kind == "regex":
                parsed.append(parse_pattern(arg))
                self.steps.append(("regex", regex.compile(arg)))
            else:
                digits = True
                self.steps.append(("digits", arg))
        self.classes = CharClasses(parsed, digits)
        #: Characters of future text that can change boundaries already read.
        self.lookahead = max([p.lookahead for p in parsed] + [1])

    def boundaries(self, text: str) -> list[int]:
        """Start offsets (characters) of the pre-tokens of ``text`` after the first, and its end."""
        if len(self.steps) == 1 and self.steps[0][0] == "regex":
            out, cursor = [], 0
            for m in self.steps[0][1].finditer(text):
                s, e = m.span()
                if s == e:
                    continue
                if s > cursor:
                    out.append(s)
                out.append(e)
                cursor = e
            if cursor < len(text):
                out.append(len(text))
            if out and out[0] == 0:
                out.pop(0)
            return out
        pieces = [(0, len(text))]
        for kind, arg in self.steps:
            new = []
            for start, end in pieces:
                new.extend(_split(kind, arg, text, start, end))
            pieces = new
        return [start for start, _ in pieces[1:]] + [len(text)]

    def verify(self, backend: Any, texts: Iterable[str]) -> None:
        """Check the emulation against ``pre_tokenize_str`` on ``texts``; a disagreement raises."""
        pre = backend.pre_tokenizer
        for text in texts:
            theirs = [end for _, (_, end) in pre.pre_tokenize_str(text)]
            ours = self.boundaries(text) if text else []
            if theirs != ours:
                raise CanonicalityUnsupportedError(
                    f"the pre-tokenizer cannot be emulated exactly: on {text!r} the tokenizer "
                    f"splits at {theirs}, the emulation at {ours}; use ByteBeamState"
                )


def _split(kind: str, arg: Any, text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Pieces of ``text[start:end]`` after one isolated-split step (absolute offsets)."""
    out: list[tuple[int, int]] = []
    cursor = start
    if kind == "regex":
        for m in arg.finditer(text, start, end):
            s, e = m.span()
            if s == e:
                continue
            if s > cursor:
                out.append((cursor, s))
            out.append((s, e))
            cursor = e
    else:  # Digits: numeric characters (Rust's char::is_numeric, \p{N}) alone or in runs
        i = start
        while i < end:
            if _NUMERIC.fullmatch(text[i]):
                j = i + 1
                if not arg:
                    while j < end and _NUMERIC.fullmatch(text[j]):
                        j += 1
                if i > cursor:
                    out.append((cursor, i))
                out.append((i, j))
                cursor = i = j
            else:
                i += 1
    if cursor < end:
        out.append((cursor, end))
    return out


def _first_of_each_row(rows: np.ndarray) -> np.ndarray:
    """Index of the first of each distinct row of a boolean matrix.

    Rows are packed into integers: ``np.unique(axis=0)`` holds the GIL ~0.2 s for planes 0-2.
    """
    packed = np.packbits(rows, axis=1)
    if packed.shape[1] <= 8:
        keys = np.zeros((len(rows), 8), dtype=np.uint8)
        keys[:, : packed.shape[1]] = packed
        _, first = np.unique(keys.view(np.uint64).ravel(), return_index=True)
        return first
    _, first = np.unique(packed, axis=0, return_index=True)  # over 64 regex atoms
    return first


def verification_texts(token_texts: list[Any], reps: list[str]) -> list[str]:
    """Texts on which the pre-tokenizer emulation must agree with the tokenizer."""
    chars = sorted({ch for t in token_texts if t is not None for ch in t[1]} | set(PROBE_CHARS))
    contexts = [
        "{}",
        "a{}",
        "{}a",
        " {}",
        "{} ",
        "{}{}",
        "1{}",
        "{}1",
        "'{}",
        "{}'s",
        "\n{}",
        "{}\n",
        "  {}x",
        ".{}.",
    ]
    texts = [c.format(ch, ch) for ch in chars for c in contexts]
    texts += [a + b + c for a in reps for b in reps for c in ("", "a", " ", "\n")]
    return texts


#: One character per Unicode category the regexes commonly test, so every class exists.
PROBE_CHARS = list("aAzZsStTrReEvVmMlLdD09 \t\n\r\x0b\x0c'\".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`")
PROBE_CHARS += ["\u00a0", "\u2003", "\u3000", "\u0301", "é", "中", "😀", "٣", "Ⅳ", "\u200b", "\x85"]
