"""domain/prom_labels.py reads a label set exactly as prometheus_client's text parser does: the
same dict for every label set the parser accepts, an error for every one it refuses, over the
exporter's own label sets and thousands of hostile ones (escapes, quotes, spaces, stray commas
and braces, repeated and reserved names)."""

import random
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuledger.domain import prom_labels
from gpuledger.domain.prom_labels import parse_labels

REFERENCE = Path(__file__).resolve().parents[4] / "shared" / "reference" / "dcgm"
NAME = "DCGM_FI_PROF_SM_ACTIVE"


def general(name: str, label_text: str):
    """What prometheus_client's parser makes of the label set: its labels, or the error type."""
    try:
        return list(text_string_to_metric_families(f"{name}{label_text} 0\n"))[0].samples[0].labels
    except Exception as exc:  # noqa: BLE001 — the kind of refusal is what is compared
        return type(exc)


def ours(name: str, label_text: str):
    try:
        return parse_labels(name, label_text)
    except Exception as exc:  # noqa: BLE001
        return type(exc)


def reference_label_sets() -> list[tuple[str, str]]:
    sets = []
    for path in sorted(REFERENCE.glob("*.txt")):
        for line in path.read_text(errors="replace").splitlines():
            brace, close = line.find("{"), line.rfind("}")
            if line and line[0] != "#" and 0 < brace < close:
                sets.append((line[:brace], line[brace:close + 1]))
    return sets


def test_the_exporters_label_sets_take_the_plain_path_and_read_the_same():
    sets = reference_label_sets()
    assert len(sets) >= 50, f"the dcgm reference under {REFERENCE} holds the exporter's label sets"
    plain = [s for s in sets if prom_labels._PLAIN.fullmatch(s[1])]
    assert len(plain) >= 0.9 * len(sets), "the exporter's label sets are read without the general parser"
    for name, text in sets:
        want = general(name, text)
        assert isinstance(want, dict) and ours(name, text) == want, (name, text)


@pytest.mark.parametrize("text", [
    "{}", '{a="1"}', '{a="1",}', '{a="",b=""}', '{a="x,y=z}{",b="}"}', '{a="1",a="2"}', '{__name__="x"}',
    '{__a="1"}', '{a="1" ,b="2"}', '{a="1", b="2"}', '{ a="1"}', '{a = "1"}', '{a="1"b="2"}', '{a="1",,b="2"}',
    '{,a="1"}', '{a="\\"q\\""}', '{a="back\\\\slash"}', '{a="new\\nline"}', '{a="bad\\x"}', '{a="1}',
    '{a=1}', '{1a="1"}', '{a-b="1"}', '{a="1"}}', '{{a="1"}', '{a="tab\tin"}', '{a="é ünï"}', '{"a"="1"}',
    '{a="1",b}', '{a}', '{=}', '{a=""",b="1"}', '{a="1"} ',
])
def test_edge_label_sets_read_as_the_parser_reads_them(text):
    assert ours(NAME, text) == general(NAME, text)


def test_hostile_label_sets_read_as_the_parser_reads_them():
    rng = random.Random(1813)
    names = ["a", "gpu", "UUID", "pod", "__name__", "__x", "_", "a1", "1a", "a-b", '"q"', "é", ""]
    pieces = ['"', "\\", ",", "=", "{", "}", " ", "\t", "x", "0", "é", "\\n", '\\"', "\\\\", "#"]
    plain_seen = refused = 0
    for _ in range(6000):
        pairs = []
        for _ in range(rng.randint(0, 4)):
            name = rng.choice(names)
            value = "".join(rng.choice(pieces) if rng.random() < 0.3 else rng.choice("abcXYZ019-./:")
                            for _ in range(rng.randint(0, 8)))
            quote = rng.random() < 0.9
            pairs.append(f'{name}={chr(34) if quote else ""}{value}{chr(34) if quote else ""}')
        sep = rng.choice([",", ",", ",", ", ", ",,", ""])
        text = "{" + sep.join(pairs) + rng.choice(["", "", ","]) + "}"
        want = general(NAME, text)
        assert ours(NAME, text) == want, text
        plain_seen += bool(prom_labels._PLAIN.fullmatch(text))
        refused += not isinstance(want, dict)
    assert plain_seen > 1000 and refused > 1000  # both paths and both outcomes were exercised
