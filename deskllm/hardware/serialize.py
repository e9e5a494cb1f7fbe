"""HardwareReport <-> plain JSON-able dict (the `deskllm hw --json` shape), and the child
probes' plain dicts -> report dataclasses.

`report_from_dict` reads profiles saved on other machines, possibly by other versions:
unknown keys are ignored, missing optional keys take their defaults, a missing required key
raises ValueError naming it.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, TypeVar

from deskllm.hardware.report import HardwareReport

T = TypeVar("T")


def report_to_dict(report: HardwareReport) -> dict[str, Any]:
    """The report as JSON-able builtins (tuples become lists)."""
    return _to_plain(report)


def report_from_dict(data: dict[str, Any]) -> HardwareReport:
    """Rebuild a report from `report_to_dict` output (or a saved `deskllm hw --json`)."""
    return _build(HardwareReport, data, "report", strict=False)


def from_plain(cls: type[T], data: dict[str, Any]) -> T:
    """Build a report dataclass from a child probe's plain dict; unknown keys are a bug."""
    return _build(cls, data, cls.__name__, strict=True)


def _to_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_to_plain(v) for v in value]
    return value


def _build(cls: type, data: Any, where: str, strict: bool) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], f"{where}.{f.name}", strict)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"{where}: missing required key {f.name!r}")
    unknown = set(data) - set(hints)
    if strict and unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    return cls(**kwargs)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _convert(hint: Any, value: Any, where: str, strict: bool) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return _convert(inner, value, where, strict)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{where}: expected a list, got {type(value).__name__}")
        item = typing.get_args(hint)[0]
        return tuple(_convert(item, v, f"{where}[{i}]", strict) for i, v in enumerate(value))
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, where, strict)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float, str, bool) and not _is_instance(value, hint):
        raise ValueError(f"{where}: expected {hint.__name__}, got {value!r}")
    return value


def _is_instance(value: Any, hint: type) -> bool:
    # bool is an int in Python, but a JSON true is not a byte count.
    if hint is int and isinstance(value, bool):
        return False
    return isinstance(value, hint)
