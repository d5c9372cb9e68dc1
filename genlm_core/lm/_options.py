"""The keyword options a backend class accepts, read from its signatures, and the error for others.

A backend's ``from_name(model_name, ..., **kwargs)`` passes what it does not use to its
class, whose ``__init__`` passes the rest up the class hierarchy to
:class:`~genlm_core.lm.AsyncLMBase`. :func:`accepted_options` follows that chain, so a
misspelled option is refused before a model is loaded, naming the valid ones and the
nearest match, instead of surfacing as a bare ``TypeError`` from a base class. Part of
the contract (``BatchedAsyncLM`` refuses options with it); loading re-exports it.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from genlm_core.errors import InvalidOptionError

__all__ = ["KEYWORDS", "accepted_options", "check_options", "unknown_option_error"]

KEYWORDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _own_options(func: Callable[..., Any], skip: int) -> tuple[list[str], bool]:
    """Keyword options of ``func`` after its first ``skip`` parameters; whether it has **kwargs."""
    try:
        params = list(inspect.signature(func).parameters.values())[skip:]
    except (TypeError, ValueError):  # a builtin or C callable: nothing to learn
        return [], True
    names = [
        p.name for p in params if p.kind in KEYWORDS and p.default is not inspect.Parameter.empty
    ]
    return names, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _class_options(cls: type) -> tuple[list[str], bool]:
    """Options of ``cls(...)``: each ``__init__`` up the MRO while it forwards **kwargs.

    A ``**kwargs`` that reaches ``object`` was consumed on the way (stored, passed
    elsewhere): the options are then open-ended.
    """
    names: list[str] = []
    forwards = False
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        if klass is object:
            return names, forwards
        own, forwards = _own_options(init, skip=1)  # self
        names += own
        if not forwards:
            return names, False
    return names, forwards


def accepted_options(target: Callable[..., Any] | type) -> list[str] | None:
    """Keyword options ``target`` accepts, or None when they cannot be known.

    Args:
        target: A backend class, or a loader: a ``from_name`` classmethod (whose
            ``**kwargs`` go to its class) or a plain function.

    Returns:
        The sorted option names; None when a ``**kwargs`` leads somewhere unknown (a
        plain function's), so that nothing can be checked.
    """
    if isinstance(target, type):
        names, open_ended = _class_options(target)
    else:
        names, open_ended = _own_options(target, skip=1)  # the model name
        owner = getattr(target, "__self__", None)
        if open_ended and isinstance(owner, type):
            more, open_ended = _class_options(owner)
            names += more
    return None if open_ended else sorted(set(names))


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
