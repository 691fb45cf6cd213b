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
3. Backend macros (``pkg/macros/macros.go`` of grafana/clickhouse-datasource 4.2.0 and later:
   the ``_ms`` variants came in 4.0.3, ``$__dateTimeFilter``/``$__dt`` in 4.2.0), interpolated
   by grafana-plugin-sdk-go ``data/sqlutil`` ``Interpolate`` (through sqlds), which adds the
   SDK's default ``$__timeFrom``, ``$__timeTo``, ``$__timeGroup``, ``$__table``,
   ``$__column``). A macro is ``$__name`` ending at a word boundary; arguments are read
   only from a ``(`` right after the name, split at top-level commas and trimmed; a missing
   ``)`` is an error. Every occurrence of a matched text is replaced.
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


# -- 3. backend macros (plugin macros + SDK defaults) --------------------------------------

def _datetime(ms: int) -> str:
    return f"toDateTime({ms // 1000})"


def _datetime64(ms: int) -> str:
    return f"fromUnixTimestamp64Milli({ms})"


def _date(ms: int) -> str:
    return "toDate('" + datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d") + "')"


def _rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms // 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _args(n: int, name: str, args: list[str] | None) -> list[str]:
    got = len(args or [])
    if got != n:
        raise MacroError(f"$__{name}: unexpected number of arguments: expected {n} argument"
                         f"{'s' if n > 1 else ''}, received {got}")
    return list(args or [])


def _interval_s(tr: TimeRange) -> int:
    return int(max(tr.interval_ms / 1000, 1))


def _time_group(args: list[str] | None) -> str:
    col, period = _args(2, "timeGroup", args)
    parts = ["minute", "hour", "day", "month", "year"]
    if period not in parts:
        return ""
    return ",".join(f"datepart({p}, {col})" for p in parts[parts.index(period):])


_MACROS = {
    "fromTime": lambda tr, a: _datetime(tr.from_ms),
    "toTime": lambda tr, a: _datetime(tr.to_ms),
    "fromTime_ms": lambda tr, a: _datetime64(tr.from_ms),
    "toTime_ms": lambda tr, a: _datetime64(tr.to_ms),
    "timeFilter": lambda tr, a: (lambda c: f"{c} >= {_datetime(tr.from_ms)} AND {c} <= {_datetime(tr.to_ms)}")(
        _args(1, "timeFilter", a)[0]),
    "timeFilter_ms": lambda tr, a: (lambda c: f"{c} >= {_datetime64(tr.from_ms)} AND {c} <= {_datetime64(tr.to_ms)}")(
        _args(1, "timeFilter_ms", a)[0]),
    "dateFilter": lambda tr, a: (lambda c: f"{c} >= {_date(tr.from_ms)} AND {c} <= {_date(tr.to_ms)}")(
        _args(1, "dateFilter", a)[0]),
    "dateTimeFilter": lambda tr, a: (lambda d, t: f"({d} >= {_date(tr.from_ms)} AND {d} <= {_date(tr.to_ms)}) AND "
                                     f"({t} >= {_datetime(tr.from_ms)} AND {t} <= {_datetime(tr.to_ms)})")(
        *_args(2, "dateTimeFilter", a)),
    "timeInterval": lambda tr, a: f"toStartOfInterval(toDateTime({_args(1, 'timeInterval', a)[0]}), "
                                  f"INTERVAL {_interval_s(tr)} second)",
    "timeInterval_ms": lambda tr, a: f"toStartOfInterval(toDateTime64({_args(1, 'timeInterval_ms', a)[0]}, 3), "
                                     f"INTERVAL {int(max(tr.interval_ms, 1))} millisecond)",
    "interval_s": lambda tr, a: str(_interval_s(tr)),
    # grafana-plugin-sdk-go sqlutil.DefaultMacros, used where the plugin defines no macro of that name
    "timeFrom": lambda tr, a: f"{_args(1, 'timeFrom', a)[0]} >= '{_rfc3339(tr.from_ms)}'",
    "timeTo": lambda tr, a: f"{_args(1, 'timeTo', a)[0]} <= '{_rfc3339(tr.to_ms)}'",
    "timeGroup": lambda tr, a: _time_group(a),
    "table": lambda tr, a: "",
    "column": lambda tr, a: "",
}
_MACROS["dt"] = lambda tr, a: _MACROS["dateTimeFilter"](tr, a)


def _parse_args(rest: str) -> tuple[list[str] | None, int]:
    """Arguments in a bracket right at the start of ``rest`` (else none), and its length."""
    if not rest.startswith("("):
        return None, 0
    args, depth, arg = [], 0, []
    for i, ch in enumerate(rest):
        if ch == "(":
            depth += 1
            if depth == 1:
                continue
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append("".join(arg).strip())
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append("".join(arg).strip())
            arg = []
            continue
        arg.append(ch)
    return None, -1


def expand_macros(sql: str, tr: TimeRange) -> str:
    for name, macro in _MACROS.items():
        matches = []
        for m in re.finditer(r"\$__" + re.escape(name) + r"\b", sql):
            args, length = _parse_args(sql[m.end():])
            if length < 0:
                raise MacroError(f"$__{name}: failed to parse macro arguments (missing close bracket?)")
            matches.append((sql[m.start():m.end() + length], args))
        for full, args in matches:
            sql = sql.replace(full, macro(tr, args))
    return sql


def render(sql: str, tr: TimeRange, variables: dict[str, Variable] | None = None) -> str:
    """A panel's ``rawSql`` as ClickHouse receives it from Grafana."""
    variables = variables or {}
    return expand_macros(replace_variables(apply_conditional_all(sql, variables), variables, tr), tr)
