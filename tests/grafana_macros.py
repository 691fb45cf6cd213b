"""What Grafana and the ClickHouse datasource plugin do to a panel's SQL before ClickHouse
sees it, so a dashboard's queries can be run in tests exactly as Grafana would run them.

Three steps, in the plugin's order:

1. ``$__conditionalAll(condition, $var)`` (frontend, ``Datasource.applyConditionalAll`` in
   ``src/data/CHDatasource.ts`` of grafana/clickhouse-datasource v4): from the last
   occurrence backwards, the first argument, or ``1=1`` when the variable's current value is
   empty or All (``$__all``).
2. Template variables (Grafana's ``TemplateSrv.replace`` with the plugin's format function):
   ``$var``, ``${var}``, ``${var:format}`` and ``[[var]]``. Without a format, a multi-value
   selection becomes ``'a','b'`` and a single value is inserted as is; ``:singlequote``
   quotes every value (``'`` escaped as ``\\'``); ``:percentencode`` percent-encodes
   everything but letters, digits and ``-_.~`` (``encodeURIComponentStrict``; a list as
   ``{a,b}``), so a value cannot leave a string literal. All selects every option's value
   unless the variable has a custom ``allValue``, which is inserted unformatted. Grafana's
   ``$__from``, ``$__to`` (epoch ms), ``$__interval_ms``, ``$__range_s`` and ``$__range_ms``
   are replaced too; any other ``$__name`` is left for the backend.
3. Backend macros, as grafana/clickhouse-datasource 4.19 and later expand them (checked
   against v4.20.0: ``pkg/macros/macros.go`` on github.com/grafana/macropro v1.0.1, installed
   as the sqlds ``Interpolator``, replacing grafana-plugin-sdk-go's ``sqlutil.Interpolate``).
   When the query holds ``$__``, ``--`` and ``/* */`` comments outside string literals
   (``''`` and ``\\'`` escapes) are blanked to spaces first. Macro names are tried longest
   first; a name matches only where no name character follows; arguments come from a ``(``
   right after the name, to its matching ``)`` (quotes respected), split at top-level commas
   and trimmed; macros inside the arguments are expanded first. A ``(`` never closed leaves the
   macro without arguments. ``$__timeFrom(c)``, ``$__timeTo(c)`` and ``$__timeGroup(c, 5m)`` are
   the plugin's ClickHouse forms (before 4.19 the SDK's RFC 3339 strings and ``datepart``);
   ``$__table`` and ``$__column`` fail without the query's table and column. A wrong number of
   arguments fails with the plugin's text (``unexpected number of arguments: $__timeFilter
   expected 1 argument(s), received 0``).
"""

from __future__ import annotations

import json
import re
from urllib.parse import quote
from dataclasses import dataclass, field
from datetime import datetime, timezone

__all__ = ["MacroError", "TimeRange", "Variable", "apply_conditional_all", "expand_macros", "render",
           "replace_variables"]


class MacroError(ValueError):
    """A macro the plugin would refuse (wrong argument count, unclosed bracket)."""


@dataclass(frozen=True)
class TimeRange:
    """The dashboard's time range and the panel interval, as the backend receives them."""

    from_ms: int
    to_ms: int
    interval_ms: int = 60_000


ALL = "$__all"


@dataclass
class Variable:
    """A dashboard variable as Grafana holds it: ``current`` is one value, a list for a
    multi-value variable, or ``$__all``; ``options`` are the values All stands for."""

    name: str
    current: str | list[str]
    options: list[str] = field(default_factory=list)
    all_value: str | None = None

    def is_all(self) -> bool:
        cur = self.current
        return cur == ALL or (isinstance(cur, list) and len(cur) > 0 and cur[0] == ALL)

    def value_string(self) -> str:
        """``current.value.toString()`` in JavaScript: a list joins with commas."""
        return ",".join(self.current) if isinstance(self.current, list) else str(self.current)


# -- 1. $__conditionalAll (frontend) -------------------------------------------------------

_CONDITIONAL = "$__conditionalAll("
_VAR_IN_ARG = re.compile(r"(?<=\$\{)[\w\d]+(?=\})|(?<=\$)[\w\d]+")


def _frontend_macro_args(query: str, args_index: int) -> list[str]:
    """``getMacroArgs``: arguments of the bracket starting at ``args_index``, split at commas
    at depth 1; an unbalanced bracket gives no arguments."""
    args: list[str] = []
    sub = query[args_index:]
    depth, last_end = 0, 1
    for m in re.finditer(r"\(|\)|,", sub):
        token = m.group(0)
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        if token == "," and depth == 1:
            args.append(sub[last_end:m.end() - 1])
            last_end = m.end()
        if depth == 0:
            args.append(sub[last_end:m.end() - 1])
            return args
    return []


def _js_replacement(replacement: str, matched: str, before: str, after: str) -> str:
    """``String.prototype.replace`` with a string pattern expands ``$$``, ``$&``, `` $` `` and ``$'``."""
    out, i = [], 0
    while i < len(replacement):
        c = replacement[i]
        nxt = replacement[i + 1] if i + 1 < len(replacement) else ""
        if c == "$" and nxt in ("$", "&", "`", "'"):
            out.append({"$": "$", "&": matched, "`": before, "'": after}[nxt])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def apply_conditional_all(sql: str, variables: dict[str, Variable]) -> str:
    index = sql.rfind(_CONDITIONAL)
    while index != -1:
        params = _frontend_macro_args(sql, index + len(_CONDITIONAL) - 1)
        if len(params) != 2:
            return sql
        phrase = params[0]
        found = _VAR_IN_ARG.search(params[1].strip())
        if found and found.group(0) in variables:
            value = variables[found.group(0)].value_string()
            if value in ("", ALL):
                phrase = "1=1"
        target = f"{_CONDITIONAL}{params[0]},{params[1]})"
        at = sql.find(target)
        if at == -1:
            return sql
        sql = sql[:at] + _js_replacement(phrase, target, sql[:at], sql[at + len(target):]) + sql[at + len(target):]
        index = sql.rfind(_CONDITIONAL)
    return sql


# -- 2. template variables (Grafana TemplateSrv.replace) -----------------------------------

_VARIABLE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^\}]+))?(?::([^\}]+))?\}")


def _datasource_format(value: str | list[str]) -> str:
    """The plugin's ``format``: a list becomes ``'a','b'`` (not escaped), a value stays as is."""
    return "'" + "','".join(value) + "'" if isinstance(value, list) else str(value)


def _quote(value: str | list[str], q: str) -> str:
    """``singlequote``/``doublequote``: each value quoted, the quote escaped with a backslash."""
    values = value if isinstance(value, list) else [str(value)]
    return ",".join(q + v.replace(q, "\\" + q) + q for v in values)


_FORMATS = {
    "singlequote": lambda v: _quote(v, "'"),
    "doublequote": lambda v: _quote(v, '"'),
    "sqlstring": lambda v: ",".join("'" + x.replace("'", "''") + "'" for x in (v if isinstance(v, list) else [str(v)])),
    "csv": lambda v: ",".join(v) if isinstance(v, list) else str(v),
    "pipe": lambda v: "|".join(v) if isinstance(v, list) else str(v),
    "raw": lambda v: ",".join(v) if isinstance(v, list) else str(v),
    "json": lambda v: json.dumps(v, separators=(",", ":")),
    "percentencode": lambda v: quote("{" + ",".join(v) + "}" if isinstance(v, list) else str(v), safe=""),
}


def _builtins(tr: TimeRange) -> dict[str, str]:
    return {"__from": str(tr.from_ms), "__to": str(tr.to_ms), "__interval_ms": str(tr.interval_ms),
            "__range_ms": str(tr.to_ms - tr.from_ms), "__range_s": str((tr.to_ms - tr.from_ms) // 1000)}


def replace_variables(sql: str, variables: dict[str, Variable], tr: TimeRange) -> str:
    builtins = _builtins(tr)

    def one(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(4)
        fmt = m.group(3) or m.group(6)
        if m.group(5):
            raise MacroError(f"field paths are not supported in this helper: {m.group(0)}")
        if name in builtins:
            return builtins[name]
        var = variables.get(name)
        if var is None:
            return m.group(0)
        value: str | list[str] = var.current
        if var.is_all():
            if var.all_value and fmt not in ("text", "percentencode"):
                return var.all_value
            value = list(var.options)
        if fmt is None:
            return _datasource_format(value)
        if fmt == "text":
            return "All" if var.is_all() else (" + ".join(value) if isinstance(value, list) else value)
        if fmt not in _FORMATS:
            raise MacroError(f"variable format {fmt!r} is not supported in this helper")
        return _FORMATS[fmt](value)

    return _VARIABLE.sub(one, sql)


# -- 3. backend macros (plugin v4.19+ on macropro) ------------------------------------------

def _datetime(ms: int) -> str:
    return f"toDateTime({ms // 1000})"


def _datetime64(ms: int) -> str:
    return f"fromUnixTimestamp64Milli({ms})"


def _date(ms: int) -> str:
    return "toDate('" + datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d") + "')"


def _args(n: int, name: str, args: list[str]) -> list[str]:
    """``badArgsErr``: sqlutil.ErrorBadArgumentCount wrapped with the macro and the counts."""
    if len(args) != n:
        raise MacroError(f"macro $__{name}({', '.join(args)}): unexpected number of arguments: "
                         f"$__{name} expected {n} argument(s), received {len(args)}")
    return args


def _interval_s(tr: TimeRange) -> int:
    return int(max(tr.interval_ms / 1000, 1))


_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


def _go_duration_s(text: str) -> float | None:
    """Go's ``time.ParseDuration`` in seconds (``5m``, ``1h30m``, ``-2s``, ``0``); None if invalid."""
    sign, body = (-1, text[1:]) if text[:1] == "-" else (1, text[1:] if text[:1] == "+" else text)
    if body == "0":
        return 0.0
    parts = _GO_PART.findall(body)
    if not body or "".join(n + u for n, u in parts) != body:
        return None
    return sign * sum(float(n) * _GO_UNITS[u] for n, u in parts)


def _time_group(tr: TimeRange, args: list[str]) -> str:
    col, period = _args(2, "timeGroup", args)
    period = period.strip().strip("'\"")
    seconds = _go_duration_s(period)
    if seconds is None:
        raise MacroError(f"macro $__timeGroup({', '.join(args)}): $__timeGroup: invalid interval {period!r}")
    if round(seconds) <= 0:
        raise MacroError(f"macro $__timeGroup({', '.join(args)}): $__timeGroup: interval must be positive, "
                         f"got {period!r}")
    return f"toStartOfInterval(toDateTime({col.strip()}), INTERVAL {round(seconds)} second)"


def _go_format_duration(ms: int) -> str:
    """macropro ``FormatDuration``: the largest whole unit (``5m``, ``2h``, ``300ms``)."""
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms" if ms else "0s"


def _context_missing(what: str):
    def fail(tr: TimeRange, args: list[str]) -> str:
        raise MacroError(f"macro $__{what}({', '.join(args)}): $__{what}: no {what} name in query context")
    return fail


_MACROS = {
    "fromTime": lambda tr, a: _datetime(tr.from_ms),
    "toTime": lambda tr, a: _datetime(tr.to_ms),
    "fromTime_ms": lambda tr, a: _datetime64(tr.from_ms),
    "toTime_ms": lambda tr, a: _datetime64(tr.to_ms),
    "timeFilter": lambda tr, a: (lambda c: f"{c} >= {_datetime(tr.from_ms)} AND {c} <= {_datetime(tr.to_ms)}")(
        *_args(1, "timeFilter", a)),
    "timeFilter_ms": lambda tr, a: (lambda c: f"{c} >= {_datetime64(tr.from_ms)} AND {c} <= {_datetime64(tr.to_ms)}")(
        *_args(1, "timeFilter_ms", a)),
    "dateFilter": lambda tr, a: (lambda c: f"{c} >= {_date(tr.from_ms)} AND {c} <= {_date(tr.to_ms)}")(
        *_args(1, "dateFilter", a)),
    "dateTimeFilter": lambda tr, a: (lambda d, t: f"({d} >= {_date(tr.from_ms)} AND {d} <= {_date(tr.to_ms)}) AND "
                                     f"({t} >= {_datetime(tr.from_ms)} AND {t} <= {_datetime(tr.to_ms)})")(
        *_args(2, "dateTimeFilter", a)),
    "timeInterval": lambda tr, a: f"toStartOfInterval(toDateTime({_args(1, 'timeInterval', a)[0]}), "
                                  f"INTERVAL {_interval_s(tr)} second)",
    "timeInterval_ms": lambda tr, a: f"toStartOfInterval(toDateTime64({_args(1, 'timeInterval_ms', a)[0]}, 3), "
                                     f"INTERVAL {int(max(tr.interval_ms, 1))} millisecond)",
    "interval_s": lambda tr, a: str(_interval_s(tr)),
    "timeFrom": lambda tr, a: f"{_args(1, 'timeFrom', a)[0]} >= {_datetime(tr.from_ms)}",
    "timeTo": lambda tr, a: f"{_args(1, 'timeTo', a)[0]} <= {_datetime(tr.to_ms)}",
    "timeGroup": _time_group,
    # macropro.DefaultMacros the plugin keeps as they are
    "interval": lambda tr, a: _go_format_duration(tr.interval_ms),
    "interval_ms": lambda tr, a: str(tr.interval_ms),
    "table": _context_missing("table"),
    "column": _context_missing("column"),
}
_MACROS["dt"] = _MACROS["dateTimeFilter"]
_BY_LENGTH = sorted(_MACROS, key=lambda n: (-len(n), n))  # longest first, then by name
_NAME_CHAR = re.compile(r"[_A-Za-z0-9]")


def _end_of_literal(sql: str, i: int) -> int:
    """Index after the quoted literal starting at ``i`` (doubled quotes and backslash escapes)."""
    quote, j = sql[i], i + 1
    while j < len(sql):
        if sql[j] == "\\":
            j += 2
        elif sql[j] == quote:
            if sql[j + 1:j + 2] == quote:
                j += 2
            else:
                return j + 1
        else:
            j += 1
    return len(sql)


def _strip_comments(sql: str) -> str:
    """``--`` to the end of the line and ``/* */`` (to the end if unclosed) become spaces."""
    out, i = [], 0
    while i < len(sql):
        c = sql[i]
        if c in "'\"":
            j = _end_of_literal(sql, i)
        elif sql.startswith("--", i):
            j = min([k for k in (sql.find("\n", i), sql.find("\r", i)) if k >= 0] or [len(sql)])
            out.append(" " * (j - i))
            i = j
            continue
        elif sql.startswith("/*", i):
            k = sql.find("*/", i + 2)
            j = len(sql) if k < 0 else k + 2
            out.append(" " * (j - i))
            i = j
            continue
        else:
            j = i + 1
        out.append(sql[i:j])
        i = j
    return "".join(out)


def _closing_paren(sql: str, start: int) -> int:
    """Index of the ``)`` that closes the ``(`` at ``start``; -1 if it never closes."""
    depth, i = 0, start
    while i < len(sql):
        c = sql[i]
        if c in "'\"":
            i = _end_of_literal(sql, i)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _split_args(raw: str) -> list[str]:
    raw = raw.strip()
    if not raw:
        return []
    args, depth, start, i = [], 0, 0, 0
    while i < len(raw):
        c = raw[i]
        if c in "'\"":
            i = _end_of_literal(raw, i)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            args.append(raw[start:i].strip())
            start = i + 1
        i += 1
    return [*args, raw[start:].strip()]


def _interpolate(sql: str, tr: TimeRange) -> str:
    for name in _BY_LENGTH:
        token, out, rest = "$__" + name, [], sql
        while (at := rest.find(token)) >= 0:
            after = at + len(token)
            if after < len(rest) and _NAME_CHAR.match(rest[after]):
                out.append(rest[:after])
                rest = rest[after:]
                continue
            out.append(rest[:at])
            rest, raw = rest[after:], ""
            if rest.startswith("("):
                end = _closing_paren(rest, 0)
                if end >= 0:
                    raw, rest = rest[1:end], rest[end + 1:]
            out.append(_MACROS[name](tr, _split_args(_interpolate(raw, tr))))
        sql = "".join(out) + rest
    return sql


def expand_macros(sql: str, tr: TimeRange) -> str:
    """The plugin's ``Interpolate``: unknown ``$__`` names are left as they are."""
    if "$__" not in sql:
        return sql
    return _interpolate(_strip_comments(sql), tr)


def render(sql: str, tr: TimeRange, variables: dict[str, Variable] | None = None) -> str:
    """A panel's ``rawSql`` as ClickHouse receives it from Grafana."""
    variables = variables or {}
    return expand_macros(replace_variables(apply_conditional_all(sql, variables), variables, tr), tr)
