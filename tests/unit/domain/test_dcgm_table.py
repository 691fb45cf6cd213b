"""The walk's two lookups without Python objects (domain/_dcgm_table.c): plain decimals read
as float() reads them, bit for bit, and the series table, which answers only what the cache
generation it mirrors holds."""

import math
import random
import struct

from gpuledger.domain import _dcgm_walk, dcgm, dcgm_reference

SERIES = 'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a"}'
KEY = ("GPU-a", None)


def _info(field: str = "power_w", low: float = -math.inf, high: float = math.inf) -> tuple:
    """A series' info as domain/dcgm.py ``_series`` makes it, any value plausible."""
    return (field, KEY, "H100", "", None, low, high, "implausible", False, None)


def _walk(text: str, cache: dict, from_old=lambda _series: None) -> dict:
    per_gpu: dict = {}
    _dcgm_walk.walk_text(text, cache, from_old, per_gpu, {}, {}, {}, {})
    return per_gpu


def _outcomes(text: str, cache: dict) -> tuple:
    """(per_gpu, skipped) of the C walk and of the Python one (domain/dcgm.py ``_walk``), values
    as their bits (a value at or past DCGM's blanks is skipped, not stored), or the error."""
    out = []
    for walk in (_dcgm_walk.walk_text, None):
        per_gpu: dict = {}
        skipped: dict = {}
        try:
            if walk is None:
                dcgm_reference._walk(text.splitlines(), cache, lambda _series: None, per_gpu, {}, {}, {}, skipped)
            else:
                walk(text, cache, lambda _series: None, per_gpu, {}, {}, {}, skipped)
        except ValueError as exc:  # the error is the outcome compared
            out.append(("raises", str(exc)))
            continue
        out.append(({k: {f: _bits(v) for f, v in fields.items()} for k, fields in per_gpu.items()}, skipped))
    return out[0], out[1]


def _bits(v: float) -> bytes:
    return struct.pack("<d", v)


def _decimals(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        sign = rng.choice(["", "", "-", "+"])
        whole = "".join(rng.choice("0123456789") for _ in range(rng.randrange(0, 17)))
        frac = "".join(rng.choice("0123456789") for _ in range(rng.randrange(0, 17)))
        text = whole + (("." + frac) if frac or rng.random() < 0.2 else "")
        if not text.strip("."):
            text = "0"
        if rng.random() < 0.3:
            text += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randrange(0, 30))
        out.append(sign + text)
    return out


def test_plain_decimals_read_as_float_reads_them():
    rng = random.Random(5)
    values = _decimals(rng, 20_000) + ["0", "-0", "0.0", "-0.0", "5.", ".5", "+.5e+2", "007", "1e22", "1e-22",
                                       "123456789012345", "1234567890123456", "0.1", "0.3", "2.675", "9007199254740993",
                                       "1e23", "8.589973e9", "0.000001", "999999999999999e22", "1.7976931348623157e308"]
    rng.shuffle(values)
    stored = 0
    for chunk in range(0, len(values), 500):
        part = values[chunk:chunk + 500]
        cache = {SERIES: _info()}
        for value in part:  # one line a value: the table and the decimal both in use from the second line
            c, py = _outcomes(f"{SERIES} {value}\n", cache)
            assert c == py, value
            if c[0]:
                assert c[0][KEY]["power_w"] == _bits(float(value)), value
                stored += 1
    assert stored > 15_000


def test_values_not_plain_are_left_to_float():
    cache = {SERIES: _info()}
    for value in ("1_000", "1e999", "-1e999", "inf", "NaN", "0x10", "1e400", "4.9e-324", "1e-30", "12345678901234567",
                  "1.00000000000000000001", "\u0663", "1e", "1e+", "+", "-", ".", "-.e1", "1.5.2", "1e5e", "e5"):
        c, py = _outcomes(f"{SERIES} {value}\n", cache)
        assert c == py, value


def test_the_table_follows_the_generation_it_is_handed():
    """A series' info comes from the dict the walk is handed: another dict (the generation
    rotated) is never answered from what the table learnt of the previous one."""
    young = {SERIES: _info("power_w")}
    assert "power_w" in _walk(f"{SERIES} 5\n{SERIES} 6\n", young)[KEY]  # learnt, then found in the table
    assert _dcgm_walk.table_size() == 1
    rotated = {SERIES: _info("fb_used_mib")}
    assert _walk(f"{SERIES} 5\n", rotated)[KEY] == {"fb_used_mib": 5.0}
    assert _walk(f"{SERIES} 5\n", young)[KEY] == {"power_w": 5.0}  # and back


def test_the_table_knows_only_what_the_generation_holds():
    """A series whose info came from elsewhere (the old generation's lookup that did not move
    it to the young one) is asked for again on its next line, never taken from the table."""
    young: dict = {}
    answers = iter([_info("power_w"), _info("fb_used_mib")])
    per_gpu = _walk(f"{SERIES} 5\n{SERIES} 6\n", young, from_old=lambda _series: next(answers))
    assert per_gpu[KEY] == {"power_w": 5.0, "fb_used_mib": 6.0}
    assert _dcgm_walk.table_size() == 0


def test_series_of_equal_hash_prefixes_stay_apart():
    """Thousands of series differing in one byte anywhere: each found as itself."""
    names = [f'DCGM_FI_DEV_POWER_USAGE{{gpu="{i}",UUID="GPU-{i:06d}",pod="p{i % 7}"}}' for i in range(3000)]
    cache = {name: (*_info()[:1], (f"GPU-{i:06d}", None), *_info()[2:]) for i, name in enumerate(names)}
    text = "".join(f"{name} {i}\n" for i, name in enumerate(names))
    for _ in range(2):  # learnt, then every line found in the table
        per_gpu = _walk(text, cache)
        assert per_gpu == {(f"GPU-{i:06d}", None): {"power_w": float(i)} for i in range(3000)}
    assert _dcgm_walk.table_size() == 3000


def test_a_walk_run_by_a_helper_of_another_walk_keeps_its_own_table():
    """A cache helper that walks another scrape with another generation (the table rebinds to
    it) and then answers the first walk: the first walk's series is not put into the table of
    the other generation."""
    other = SERIES.replace('gpu="0"', 'gpu="1"')
    inner = {SERIES: _info("fb_used_mib"), other: _info("fb_used_mib")}
    outer: dict = {}

    def from_old(series):
        _walk(f"{other} 1\n", inner)  # binds the table to ``inner``
        outer[series] = _info("power_w")  # moved to the outer generation, as _Generations.from_old does
        return outer[series]

    assert _walk(f"{SERIES} 5\n", outer, from_old=from_old)[KEY] == {"power_w": 5.0}
    assert _walk(f"{SERIES} 7\n", inner)[KEY] == {"fb_used_mib": 7.0}  # the table bound to ``inner`` answers for it
