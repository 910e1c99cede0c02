"""What every integration checks of the objects it is handed, so that a wrong one is one line naming what was
expected (the framework's class and the fields it needs), never an AttributeError, KeyError or IndexError from
inside the helper."""

from __future__ import annotations

from typing import Any

from ..errors import BadInput


def kind(value: Any) -> str:
    """How a message names what was given: its type, and its shape when it has one."""
    shape = getattr(value, "shape", None)
    return f"{type(value).__name__}{list(shape) if shape is not None and not callable(shape) else ''}"


def needs(who: str, value: Any, expected: str, attributes: tuple[str, ...], where: str = "") -> None:
    """`value` has every one of `attributes`, else BadInput: `who: [where: ]expected EXPECTED; got TYPE (no 'name')`."""
    missing = [a for a in attributes if not hasattr(value, a)]
    if value is None or missing:
        why = "" if value is None else f" (no '{missing[0]}')"
        raise BadInput(who, f"{where + ': ' if where else ''}expected {expected}; got {kind(value)}{why}")


def tensor(who: str, name: str, value: Any, ndim: int | None = 2) -> Any:
    """A torch tensor (what the framework holds), of `ndim` dimensions when given."""
    if not (hasattr(value, "detach") and hasattr(value, "cpu") and hasattr(value, "shape")):
        raise BadInput(who, f"'{name}' is {kind(value)}: expected a torch tensor, as the framework holds it")
    if ndim is not None and len(value.shape) != ndim:
        raise BadInput(who, f"'{name}' has shape {list(value.shape)}: expected {ndim} dimensions")
    return value


def user_meta(who: str, options: dict) -> dict:
    """The `meta=` a caller passes through the helper to save_step: a dict, or none."""
    meta = options.get("meta")
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise BadInput(who, f"meta is {type(meta).__name__}, expected a dict")
    return meta


def version(value: Any) -> Any:
    """A framework's policy version as save_step takes it: an integer (numpy's too), None (not recorded, or NaN in an
    object array); anything else is left for save_step to refuse, naming it."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
