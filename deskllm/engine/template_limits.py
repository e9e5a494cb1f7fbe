"""A Jinja sandbox that bounds what one chat-template render may allocate.

Jinja's sandbox stops escapes, not resource bombs: `'a'.ljust(10**9)`, `'%0999999999d' % 1`,
`'{:>999999999}'.format(1)` or `'x'|center(10**9)` allocate gigabytes inside one C call, where
the render deadline (a trace hook) cannot interrupt them. BoundedSandbox computes the size of a
result *before* every operation that can amplify its inputs (padding widths, repeat counts,
replace, join, format fields, concatenation, text of nested lists) and refuses it past the
limit with TemplateLimitError, so no value a template builds grows past `max_chars`.
"""

from __future__ import annotations

import functools
import json
import re
import types
from collections.abc import Callable, Iterable
from string import Formatter
from typing import Any

from jinja2 import TemplateError
from jinja2.compiler import CodeGenerator
from jinja2.filters import make_attrgetter
from jinja2.runtime import Namespace, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter
from markupsafe import EscapeFormatter, Markup

MAX_INT_BITS = 1 << 16  # ~20,000 decimal digits: no chat template needs more
MAX_JSON_INDENT = 64
# Filters that turn their first argument into text, so a nested list given to them is sized first.
_TEXT_FILTERS = frozenset(
    [
        "capitalize", "center", "e", "escape", "forceescape", "format", "indent", "join",
        "lower", "pprint", "replace", "safe", "string", "striptags", "title", "tojson", "trim",
        "truncate", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr",
    ]
)
_PRINTF_FIELD = re.compile(r"%(?:\([^)]*\))?[#0 +\-]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.)", re.S)
_DIGITS = re.compile(r"\d+")
_CONTAINERS = (dict, list, tuple, set, frozenset, Namespace)


class TemplateLimitError(TemplateError):
    """A template asked for more than a render may use; the message names what."""


def _arg(args: tuple, kwargs: dict, index: int, name: str, default: Any) -> Any:
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


class _BoundedCodeGenerator(CodeGenerator):
    """Sends `a ~ b` through the environment: Jinja joins its parts in C, unchecked."""

    def visit_Concat(self, node: Any, frame: Any) -> None:
        self.write("environment.concat_values((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with every amplifying operation sized before it runs.

    Attributes:
        max_chars: the largest string (characters) or list (items) a template may build.
    """

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset(["*", "**", "+", "%"])

    def __init__(self, max_chars: int, **options: Any) -> None:
        super().__init__(**options)
        self.max_chars = max_chars
        self.finalize = self._finalize
        # Set blocks, macros and call blocks join their output with this.
        self.concat = self._concat_chunks
        self.filters = {name: self._bounded_filter(name, f) for name, f in self.filters.items()}
        self.filters["tojson"] = self._bounded_filter("tojson", self._tojson)
        self.filters["sum"] = self._bounded_filter("sum", self._sum)
        self.globals["lipsum"] = self._lipsum

    # Size checks -------------------------------------------------------------------------------
    def check(self, size: int, what: str) -> None:
        if size > self.max_chars:
            raise TemplateLimitError(
                f"{what} is too large: {size:,} characters or items, the limit is "
                f"{self.max_chars:,}"
            )

    def text_size(self, value: Any, what: str) -> int:
        """An upper bound on len(str(value)), found without building it: a list that holds
        itself a thousand times over has a tiny footprint and a gigantic repr. Each distinct
        object is sized once (post-order walk, sizes kept by id), so aliasing costs nothing."""
        if isinstance(value, str | bytes):
            return len(value)
        sizes: dict[int, int] = {}
        open_ids: set[int] = set()  # a container met again inside itself prints as [...]
        stack: list[tuple[Any, bool]] = [(value, False)]
        while stack:  # no calls to Python functions inside: the render's tracer sees each
            item, children_done = stack.pop()
            key = id(item)
            if not isinstance(item, _CONTAINERS):  # only the top value can be a leaf here
                sizes[key] = item.bit_length() // 3 + 2 if isinstance(item, int) else 64
                continue
            if isinstance(item, dict):
                children = [*item.keys(), *item.values()]
            elif isinstance(item, Namespace):  # its repr shows its attributes
                children = [item._Namespace__attrs]  # type: ignore[attr-defined]
            else:
                children = list(item)
            if not children_done:
                if key in sizes or key in open_ids:
                    continue
                open_ids.add(key)
                stack.append((item, True))
                stack.extend(
                    (c, False)
                    for c in children
                    if isinstance(c, _CONTAINERS) and id(c) not in sizes
                )
                continue
            open_ids.discard(key)
            size = 2 + 2 * len(children)
            for c in children:
                if isinstance(c, _CONTAINERS):
                    size += sizes.get(id(c), 8)
                elif isinstance(c, str | bytes):
                    size += len(c) + 3
                else:  # numbers (bounded to MAX_INT_BITS), None, Undefined: short reprs
                    size += c.bit_length() // 3 + 2 if isinstance(c, int) else 64
            sizes[key] = size
            self.check(size, what)
        return sizes[id(value)]

    def bounded(self, value: Any, what: str) -> Any:
        """Check a value that was just built; it stops any growth one step past the limit."""
        if isinstance(value, str | bytes | list | tuple | dict | set | frozenset):
            self.check(len(value), what)
        elif isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            raise TemplateLimitError(f"{what} is too large: a {value.bit_length():,}-bit number")
        return value

    def _finalize(self, value: Any) -> Any:
        if not isinstance(value, str):
            self.text_size(value, "the printed value")
        return value

    def concat_values(self, parts: tuple) -> str:
        total = sum(self.text_size(part, "a '~' concatenation") for part in parts)
        self.check(total, "a '~' concatenation")
        return str_join(parts)

    def _concat_chunks(self, chunks: Iterable[str]) -> str:
        chunks = list(chunks)
        self.check(sum(len(c) for c in chunks), "a set block or macro output")
        return "".join(chunks)

    # Operators ---------------------------------------------------------------------------------
    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0:
            bits = max(abs(left).bit_length() - 1, 0) * right
            if bits > MAX_INT_BITS or (abs(left) > 1 and right > MAX_INT_BITS):
                raise TemplateLimitError(
                    f"a power of a {abs(left).bit_length()}-bit number is too large"
                )
        elif operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, str | bytes | list | tuple) and isinstance(times, int):
                    self.check(len(seq) * times, "a repeated string or list")
            if (
                isinstance(left, int)
                and isinstance(right, int)
                and left.bit_length() + right.bit_length() > MAX_INT_BITS
            ):
                raise TemplateLimitError("a product of numbers is too large")
        elif operator == "+":
            if isinstance(left, str | bytes | list | tuple) and type(left) is type(right):
                self.check(len(left) + len(right), "a '+' concatenation")
        elif operator == "%" and isinstance(left, str | bytes):
            self.check_printf(left, right, "a '%' format")
        return self.bounded(super().call_binop(context, operator, left, right), operator)

    def check_printf(self, fmt: str | bytes, args: Any, what: str) -> None:
        """Size `fmt % args` before formatting: widths and precisions pad in C."""
        text = fmt.decode("latin-1") if isinstance(fmt, bytes) else fmt
        positional = list(args) if isinstance(args, tuple) else [args]
        total = len(text) + self.text_size(args, what)
        for width, precision, _conversion in _PRINTF_FIELD.findall(text):
            for number in (width, precision):
                if number == "*":
                    number = positional.pop(0) if positional and isinstance(
                        positional[0], int
                    ) else 0
                total += abs(int(number or 0))
        self.check(total, what)

    # Calls -------------------------------------------------------------------------------------
    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        # Jinja before 3.1.5 hands str.format over unwrapped: wrap it here too.
        obj = self.wrap_str_format(obj) or obj
        owner = getattr(obj, "__self__", None)
        name = getattr(obj, "__name__", "a call")
        if isinstance(obj, types.BuiltinMethodType) and isinstance(owner, str | bytes):
            what = f"{type(owner).__name__}.{name}"
            args = self._check_text_method(owner, name, args, kwargs, what)
        return self.bounded(super().call(context, obj, *args, **kwargs), name)

    def _check_text_method(
        self, text: str | bytes, name: str, args: tuple, kwargs: dict, what: str
    ) -> tuple:
        """Refuse a str/bytes method call whose result would pass the limit; returns the
        arguments to call it with (join's iterable is read once, here)."""
        if name in ("ljust", "rjust", "center", "zfill"):
            width = _arg(args, kwargs, 0, "width", 0)
            if isinstance(width, int):
                self.check(width, f"{what}({width})")
        elif name == "expandtabs":
            tabsize = _arg(args, kwargs, 0, "tabsize", 8)
            tab = "\t" if isinstance(text, str) else b"\t"
            if isinstance(tabsize, int):
                self.check(len(text) + text.count(tab) * max(tabsize, 0), f"{what}({tabsize})")
        elif name == "replace" and len(args) >= 2:
            old, new = args[0], args[1]
            count = _arg(args, kwargs, 2, "count", -1)
            if isinstance(old, type(text)) and isinstance(new, type(text)):
                self.check(_replaced_size(text, old, new, count), what)
        elif name == "join" and args:
            items = list(args[0])
            size = len(text) * max(len(items) - 1, 0)
            size += sum(len(i) for i in items if isinstance(i, str | bytes))
            self.check(size, what)
            return (items, *args[1:])
        elif name in ("translate", "maketrans"):
            raise TemplateLimitError(f"{what} is not available in chat templates")
        return args

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """`str.format` and `format_map`, through a formatter that sizes each field first."""
        if not isinstance(value, types.MethodType | types.BuiltinMethodType) or (
            value.__name__ not in ("format", "format_map")
        ):
            return None
        text = value.__self__
        if not isinstance(text, str):
            return None
        is_map = value.__name__ == "format_map"
        if isinstance(text, Markup):
            formatter: Formatter = _BoundedEscapeFormatter(self, escape=text.escape)
        else:
            formatter = _BoundedFormatter(self)

        def wrapper(*args: Any, **kwargs: Any) -> str:
            if is_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                args, kwargs = (), args[0]
            formatter.total = len(text)
            return type(text)(formatter.vformat(text, args, kwargs))

        return functools.update_wrapper(wrapper, value)

    # Filters and globals -----------------------------------------------------------------------
    def _bounded_filter(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        # Filters marked pass_context/pass_environment/pass_eval_context get that first.
        offset = 1 if hasattr(func, "jinja_pass_arg") else 0
        check = getattr(self, f"_check_filter_{name}", None)

        @functools.wraps(func)
        def bounded_filter(*args: Any, **kwargs: Any) -> Any:
            value, params = args[offset], args[offset + 1 :]
            what = f"the '{name}' filter"
            if name in _TEXT_FILTERS:
                self.text_size(value, what)
            if check is not None:
                value = check(value, params, kwargs, what)
                args = (*args[:offset], value, *params)
            return self.bounded(func(*args, **kwargs), what)

        return bounded_filter

    def _check_filter_center(self, value: Any, params: tuple, kwargs: dict, what: str) -> Any:
        width = _arg(params, kwargs, 0, "width", 80)
        if isinstance(width, int):
            self.check(width, f"{what} with width {width}")
        return value

    def _check_filter_indent(self, value: Any, params: tuple, kwargs: dict, what: str) -> Any:
        width = _arg(params, kwargs, 0, "width", 4)
        pad = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        text = str(value)
        self.check(len(text) + pad * (text.count("\n") + 1), f"{what} with width {pad}")
        return value

    def _check_filter_wordwrap(self, value: Any, params: tuple, kwargs: dict, what: str) -> Any:
        width = _arg(params, kwargs, 0, "width", 79)
        wrapstring = _arg(params, kwargs, 2, "wrapstring", None) or "\n"
        text = str(value)
        lines = len(text) // max(width if isinstance(width, int) else 1, 1) + text.count("\n") + 1
        self.check(len(text) + len(str(wrapstring)) * lines, what)
        return value

    def _check_filter_format(self, value: Any, params: tuple, kwargs: dict, what: str) -> Any:
        self.check_printf(str(value), kwargs or params, what)
        return value

    def _check_filter_replace(self, value: Any, params: tuple, kwargs: dict, what: str) -> Any:
        old = str(_arg(params, kwargs, 0, "old", ""))
        new = str(_arg(params, kwargs, 1, "new", ""))
        count = _arg(params, kwargs, 2, "count", None)
        self.check(_replaced_size(str(value), old, new, -1 if count is None else count), what)
        return value

    def _check_filter_join(self, value: Any, params: tuple, kwargs: dict, what: str) -> Any:
        items = list(value)
        separator = str(_arg(params, kwargs, 0, "d", ""))
        size = len(separator) * max(len(items) - 1, 0)
        self.check(size + self.text_size(items, what), what)
        return items

    def _check_filter_batch(self, value: Any, params: tuple, kwargs: dict, what: str) -> Any:
        count = _arg(params, kwargs, 0, "linecount", 1)
        if isinstance(count, int):
            self.check(count, f"{what} with {count} per batch")
        return value

    def _check_filter_slice(self, value: Any, params: tuple, kwargs: dict, what: str) -> Any:
        count = _arg(params, kwargs, 0, "slices", 1)
        if isinstance(count, int):
            self.check(count, f"{what} into {count} slices")
        return value

    def _tojson(self, value: Any, indent: int | str | None = None) -> str:
        """JSON written piece by piece, so a nested list repeated many times is cut at the
        limit instead of being encoded whole in C."""
        if isinstance(indent, int) and indent > MAX_JSON_INDENT:
            raise TemplateLimitError(f"tojson indent {indent} is over {MAX_JSON_INDENT}")
        if isinstance(indent, str) and len(indent) > MAX_JSON_INDENT:
            raise TemplateLimitError(f"tojson indent is over {MAX_JSON_INDENT} characters")
        encoder = json.JSONEncoder(indent=indent, ensure_ascii=False)
        parts, total = [], 0
        for chunk in encoder.iterencode(value):
            total += len(chunk)
            self.check(total, "the 'tojson' filter")
            parts.append(chunk)
        return "".join(parts)

    def _sum(self, iterable: Iterable[Any], attribute: Any = None, start: Any = 0) -> Any:
        """Added up one step at a time: sum() of many lists copies quadratically in C."""
        getter = make_attrgetter(self, attribute) if attribute is not None else None
        total = start
        for item in iterable:
            if getter is not None:
                item = getter(item)
            total = self.call_binop(None, "+", total, item)
        return total

    def _lipsum(self, n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
        from jinja2.utils import generate_lorem_ipsum

        self.check(n * max, "lipsum")
        return generate_lorem_ipsum(n, html, min, max)


def _replaced_size(text: Any, old: Any, new: Any, count: int) -> int:
    hits = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return len(text) + hits * (len(new) - len(old))


class _BoundedFormatter(SandboxedFormatter):
    """Sizes each `{}` field of str.format before formatting it."""

    total = 0

    def format_field(self, value: Any, format_spec: str) -> Any:
        env: BoundedSandbox = self._env  # type: ignore[assignment]
        numbers = [int(d) for d in _DIGITS.findall(format_spec)]
        field = max([*numbers, env.text_size(value, "a str.format field")])
        env.check(field, f"a str.format field '{{:{format_spec}}}'")
        self.total += field
        env.check(self.total, "str.format")
        return super().format_field(value, format_spec)


class _BoundedEscapeFormatter(_BoundedFormatter, EscapeFormatter):
    pass
