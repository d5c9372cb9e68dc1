"""The keyword options a backend class accepts, read from its signatures, and the error for others.

[`accepted_options`][] follows ``**kwargs`` up the ``__init__`` chain, so a misspelled
option is refused before a model loads, naming the valid ones and the nearest match.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from genlm_core.errors import InvalidOptionError

KEYWORDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _owner(target: Callable[..., Any] | type) -> type | None:
    """The class whose ``__init__`` chain ``target``'s ``**kwargs`` reach, if any."""
    owner = target if isinstance(target, type) else getattr(target, "__self__", None)
    return owner if isinstance(owner, type) else None


def option_levels(target: Callable[..., Any] | type) -> list[tuple[Any, type | None, Any]]:
    """``(function, its class or None, its parameters)`` for each level options pass through.

    ``target`` unless a class, then each ``__init__`` up the MRO; parameters after the
    first (None if unreadable). Callers stop at the first level not [`forwards`][].
    """
    owner = _owner(target)
    levels = [] if target is owner else [(target, None)]
    classes = owner.__mro__[:-1] if owner is not None else ()  # object's __init__ takes none
    levels += [(k.__dict__["__init__"], k) for k in classes if "__init__" in k.__dict__]
    out = []
    for func, klass in levels:
        try:
            out.append((func, klass, list(inspect.signature(func).parameters.values())[1:]))
        except (TypeError, ValueError):  # a builtin or C callable: nothing to learn
            out.append((func, klass, None))
    return out


def forwards(params: list[inspect.Parameter] | None) -> bool:
    """Whether a level passes options on: it has ``**kwargs`` (or cannot be read)."""
    return params is None or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def defaulted(params: list[inspect.Parameter] | None) -> list[inspect.Parameter]:
    """The keyword parameters with a default among ``params``: a level's options.

    ``backend=`` is BatchedAsyncLM's object to compute with, never a loader's option.
    """
    return [
        p
        for p in params or ()
        if p.kind in KEYWORDS and p.default is not p.empty and p.name != "backend"
    ]


def accepted_options(target: Callable[..., Any] | type) -> list[str] | None:
    """Keyword options ``target`` accepts, or None when they cannot be known.

    ``target`` is a backend class, a ``from_name`` classmethod (whose ``**kwargs`` go to
    its class) or a plain function. None when a ``**kwargs`` leads somewhere unknown (a
    plain function's, or one reaching ``object``), so that nothing can be checked.
    """
    levels = option_levels(target)
    names: set[str] = set()
    for _, _, params in levels:
        names.update(p.name for p in defaulted(params))
        if not forwards(params):
            return sorted(names)
    # Every level passes options on: past a class's last __init__, or out of a plain
    # function, to where they cannot be followed.
    open_ended = (levels and levels[-1][1] is not None) or _owner(target) is None
    return None if open_ended else sorted(names)


def unknown_option_error(who: str, option: str, valid: Iterable[str]) -> InvalidOptionError:
    """The error for ``option``, naming ``who`` refused it, the valid options and a near match."""
    valid = sorted(valid)
    close = difflib.get_close_matches(option, valid, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else "."
    return InvalidOptionError(
        f"{who} has no option {option!r}{hint} Valid options: {', '.join(valid) or 'none'}"
    )


def check_options(target: Callable[..., Any] | type, options: Iterable[str], who: str) -> None:
    """Refuse the first of ``options`` that ``target`` does not accept.

    Raises:
        InvalidOptionError: Naming ``who``, the option, the valid ones and a near match.
    """
    valid = accepted_options(target)
    if valid is None:
        return
    for option in options:
        if option not in valid:
            raise unknown_option_error(who, option, valid)
