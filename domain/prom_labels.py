"""A Prometheus label set (``{name="value",...}``) -> dict, as prometheus_client's text parser reads it.

dcgm-exporter writes its label sets in one plain form: ``name="value"`` pairs joined by commas,
no spaces, no escapes. That form is read here with one regular expression; every other text
(spaces, escapes, quoted or reserved names, repeated names, anything malformed) goes to
prometheus_client's parser, which accepts or refuses it as it always has. The plain form is a
strict subset of what that parser accepts, and gives the same dict
(tests/unit/domain/test_prom_labels.py holds the two to each other over hostile label sets).

A label set is parsed once per distinct series (domain/dcgm.py caches the result), but pod churn
and reading that moves between partitions bring new and returning series all day: the plain
form costs a few microseconds where the general parser costs tens.
"""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["parse_labels"]

_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
_PAIR = _NAME + r'="[^"\\]*"'
_PLAIN = re.compile(r"\{(?:" + _PAIR + r"(?:," + _PAIR + r")*,?)?\}")
_PAIRS = re.compile(r'(' + _NAME + r')="([^"\\]*)"')


def parse_labels(name: str, label_text: str) -> dict[str, str]:
    """The labels of ``name{...}``; raises ValueError (or the parser's error) for a label set
    prometheus_client refuses. ``name`` must be a valid metric name."""
    if _PLAIN.fullmatch(label_text):
        pairs = _PAIRS.findall(label_text)
        labels = dict(pairs)
        if len(labels) == len(pairs) and not any(k.startswith("__") for k in labels):
            return labels
    return list(text_string_to_metric_families(f"{name}{label_text} 0\n"))[0].samples[0].labels
