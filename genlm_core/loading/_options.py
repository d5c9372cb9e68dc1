"""Loading options: dtypes, engine options, and the options' descriptions.

Which options a backend accepts is the contract's (`genlm_core.lm._options`).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from typing import Any

from genlm_core.errors import InvalidArgumentError
from genlm_core.lm._options import defaulted, forwards, option_levels

#: What every backend's ``dtype=`` option accepts ("auto": the checkpoint's own dtype).
DTYPES = ("auto", "float32", "bfloat16", "float16")


def check_dtype(dtype: Any, backend: str) -> str:
    """``dtype`` as one of [`DTYPES`][] (a ``torch.dtype`` is accepted by its name).

    Raises:
        InvalidArgumentError: Any other value, naming the backend and the choices.
    """
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise InvalidArgumentError(
            f"backend {backend!r}: dtype must be one of {', '.join(map(repr, DTYPES))}, "
            f"got {dtype!r}"
        )
    return name


def merge_engine_options(
    engine_opts: dict[str, Any] | None, backend: str, **common: Any
) -> dict[str, Any]:
    """``engine_opts`` with the common options given (``dtype=``, ``revision=``), checked.

    For engine backends, whose engine takes those options under the same names.

    Raises:
        InvalidArgumentError: A bad dtype, or an option given both ways with two values.
    """
    opts = dict(engine_opts or {})
    for name, value in common.items():
        if value is None:
            continue
        if name == "dtype":
            value = check_dtype(value, backend)
        if name in opts and opts[name] != value:
            raise InvalidArgumentError(
                f"backend {backend!r}: {name}={value!r} and engine_opts[{name!r}]="
                f"{opts[name]!r} disagree; give one of them"
            )
        opts[name] = value
    return opts


@dataclasses.dataclass(frozen=True)
class Option:
    """One keyword option of a backend's loader.

    Attributes:
        name: Its keyword.
        default: Its default, as written (``repr``).
        help: The first sentence of its description in the docstring that defines it.
        where: The function or class that takes it (``AsyncTransformer.from_name``).
    """

    name: str
    default: str
    help: str
    where: str


_ARG = re.compile(r"^(\s*)(\*{0,2}\w+)(?: \([^)]*\))?: (.*)$")


def _arg_docs(func: Any) -> dict[str, str]:
    """``{name: description}`` from a Google-style docstring's ``Args:`` section."""
    lines = (inspect.getdoc(func) or "").splitlines()
    docs: dict[str, str] = {}
    try:
        start = lines.index("Args:") + 1
    except ValueError:
        return docs
    indent, current = None, None
    for line in lines[start:]:
        if line and not line[0].isspace():
            break  # the next section
        match = _ARG.match(line)
        if match and (indent is None or len(match[1]) == indent):
            indent, current = len(match[1]), match[2].lstrip("*")
            docs[current] = match[3].strip()
        elif current and line.strip():
            docs[current] += " " + line.strip()
    return {name: _CROSSREF.sub(r"\1", text) for name, text in docs.items()}


#: A docs cross-reference, ``[`name`][target]``: a terminal shows ``name`` alone.
_CROSSREF = re.compile(r"\[(`[^`]+`)\]\[[^\]]*\]")


def _first_sentence(text: str) -> str:
    head = re.split(r"(?<=[.;])\s+(?=[A-Z])", text, maxsplit=1)[0]  # not at "e.g. ``x``"
    return head.rstrip(".;")


def describe_options(target: Callable[..., Any] | type) -> list[Option]:
    """Every keyword option ``target`` accepts, with its default and its description.

    Follows the same chain as [`accepted_options`][] (``from_name``, then each
    ``__init__`` up the class hierarchy while ``**kwargs`` are passed on); an option
    taken at two levels is described where it is first met.
    """
    options: dict[str, Option] = {}
    for func, klass, params in option_levels(target):
        if klass is None:
            where, docs = getattr(func, "__qualname__", repr(func)), _arg_docs(func)
        else:  # a class documents its __init__
            where, docs = klass.__name__, {**_arg_docs(klass), **_arg_docs(func)}
        for p in defaulted(params):
            help_text = _first_sentence(docs.get(p.name, ""))
            options.setdefault(p.name, Option(p.name, repr(p.default), help_text, where))
        if not forwards(params):
            break
    return sorted(options.values(), key=lambda o: o.name)
