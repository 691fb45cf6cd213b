"""The walk over a scrape's lines in C (domain/_dcgm_walk.c) against its reference in Python
(domain/dcgm.py ``_walk``): on real scrapes, generated fleets and every way a line can be
spoiled, the same samples, counts, skip reasons and health readings, or the same error. The
C walk is taken both ways: with the scrape's devices held in C (domain/_dcgm_devices.c,
``walk_samples``) and into the dicts the reference fills (``walk_text``, then ``samples``)."""

import math
import random
from pathlib import Path

import pytest

from gpuledger.bench.fleet_gen import _Node, fleet_plan
from gpuledger.domain import _dcgm_walk  # built at install: a missing build fails here, not silently slower
from gpuledger.domain import dcgm, dcgm_reference

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm"


def _fresh_caches() -> None:
    dcgm._SERIES, dcgm._LABELS, dcgm._HEALTH = dcgm._Generations(), dcgm._Generations(), dcgm._Generations()


# (_c_walk, _c_samples, _c_walk_samples) of each way to parse
_PATHS = {"devices in C": (_dcgm_walk.walk_text, _dcgm_walk.samples, _dcgm_walk.walk_samples),
          "dicts in C": (_dcgm_walk.walk_text, _dcgm_walk.samples, None), "Python": (None, None, None)}


def _outcome(text: str, path: str) -> tuple:
    """Parse one of the ways of ``_PATHS``."""
    saved = dcgm._c_walk, dcgm._c_samples, dcgm._c_walk_samples
    dcgm._c_walk, dcgm._c_samples, dcgm._c_walk_samples = _PATHS[path]
    try:
        parsed = dcgm.parse_exposition(text)
    except Exception as exc:  # noqa: BLE001 — the error is the outcome compared
        return ("raises", type(exc).__name__, str(exc))
    finally:
        dcgm._c_walk, dcgm._c_samples, dcgm._c_walk_samples = saved
    return ("parses", parsed.samples, [_fields(s) for s in parsed.samples], parsed.series_parsed, parsed.skipped,
            parsed.health)


def _fields(sample) -> str:
    """A sample's class and fields in its dataclass's order, exactly (-0.0 apart from 0.0, an int
    from a float), and its __dict__ where it has one (a DeviceSample keeps its fields in slots):
    what the samples in C must build as the reference builds it."""
    values = [(k, type(v).__name__, v) for k, v in ((f, getattr(sample, f)) for f in dcgm._SAMPLE_FIELDS)]
    return repr((type(sample), values, getattr(sample, "__dict__", None)))


def _both(text: str) -> tuple:
    """The outcome of each way, each from empty caches, then each again from the caches its first
    run filled (a hit takes other steps than a miss). The two in C must agree (checked here);
    returned: the devices in C, and the Python reference."""
    out = {}
    for path in _PATHS:
        _fresh_caches()
        first = _outcome(text, path)
        out[path] = (first, _outcome(text, path))
    _fresh_caches()
    assert out["devices in C"] == out["dicts in C"], text
    return out["devices in C"], out["Python"]


def test_the_build_is_in_use():
    assert (dcgm._c_walk, dcgm._c_samples, dcgm._c_walk_samples) == _PATHS["devices in C"]


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.txt")))
def test_real_scrapes(name):
    c, py = _both((FIXTURES / name).read_text())
    assert c == py
    assert c[0][0] == "parses" and c[0][1], "a real scrape has samples"


def _fleet_texts(n: int, seed: int) -> list[str]:
    plan = fleet_plan(16, 1, 10, 10)
    rng = random.Random(seed)
    texts = []
    for node in plan.nodes:
        gen = _Node(plan, node, [p for p in plan.pods if p.node == node], rng)
        for t in range(plan.start_ms, plan.start_ms + 10 * 60_000, 60_000):
            texts.append(gen.scrape(t)[0])
    return texts[:n]


def test_generated_fleet_scrapes():
    for text in _fleet_texts(20, 1):
        c, py = _both(text)
        assert c == py
        assert c[0][0] == "parses" and len(c[0][1]) == 8


_VALUES = ["NaN", "+Inf", "-Inf", "-1", "1e999", "0x10", "1_000", "5 1700000000000", "\u0663", "", "  7  ", "7\t",
           "\t7", "7\x0b", "abc", "9223372036854775794", "140737488355330", "1e-320", "-0", "0.5e", ".5", "5.", "+.5e+2",
           "nan(1)", "infinity", "1e308", "1073741824", "99999.9", "1.5 # comment"]
_LABELS = ['{gpu="0",UUID="GPU-a",Hostname="n"}', '{gpu="1",gpu_uuid="GPU-b"}', '{gpu="2"}',
           '{gpu="0",UUID="GPU-a",GPU_I_ID="x"}', '{gpu="0",UUID="GPU-a",GPU_I_ID="3",GPU_I_PROFILE="1g.10gb"}',
           '{gpu="0",UUID="GPU-a",namespace="ns",pod="p1"}', '{gpu="0",UUID="GPU-a",namespace="ns",pod="p2"}',
           '{UUID="GPU-\u00e9",modelName="GRID A100-40C"}', '{gpu="0",UUID="GPU-a"', '{gpu="0",UUID="GPU-a",bad label}',
           '', '{}', '{gpu="0",UUID="GPU-a",quote="a\\"b}c"}', '{UUID="GPU-a",pci_bus_id="00000000:01:00.0"}']
_NAMES = [*dcgm._FIELDS, "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_FREE",
          "DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
          "DCGM_FI_DEV_SM_CLOCK", "# HELP DCGM_FI_DEV_SM_CLOCK", "#", ""]


def test_spoiled_lines_every_way():
    """Random scrapes of real series names, label sets good and bad, and values float() takes,
    refuses or takes only with help (blanks, a timestamp, an underscore, a non-ASCII digit):
    the same result or the same error, line order and repeats included."""
    rng = random.Random(17)
    seen = {"parses": 0, "raises": 0}
    for _ in range(1500):
        lines = []
        for _ in range(rng.randrange(1, 12)):
            name = rng.choice(_NAMES)
            if name.startswith("#") or not name:
                lines.append(name)
                continue
            lines.append(f"{name}{rng.choice(_LABELS)} {rng.choice(_VALUES)}")
        seps = ["\n", "\r\n", "\n\n", "\x0c", "\r", "\x0b", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029",
                "\r\r\n", "\n\r", "\x00\n"]
        if rng.random() < 0.5:  # one line break throughout, as an exporter writes
            sep = rng.choice(seps)
            text = sep.join(lines)
        else:  # any mix: the C walk splits where splitlines() does
            text = "".join(line + rng.choice(seps) for line in lines)
        text += rng.choice(["", "\n", "\r", "\r\n", "\u2028"])
        c, py = _both(text)
        assert c == py, text
        seen[c[0][0]] += 1
        if c[0][0] == "parses":  # and it walked the lines splitlines() gives, no more, no fewer
            walked = _dcgm_walk.walk_text(text, {}, lambda _series: None, {}, {}, {}, {}, {})
            assert walked[1] == len(text.splitlines()), text
    assert seen["parses"] > 100 and seen["raises"] > 100, seen


@pytest.mark.parametrize("odd", ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x00"])
def test_a_single_break_other_than_newline_anywhere_splits_as_splitlines(odd):
    """The walk splits a text at \\n alone only where it holds no other break splitlines() makes:
    one such byte at any offset, in a line or at its end, in a text otherwise plain, still splits
    where splitlines() does (a byte missed makes one line of two)."""
    base = "\n".join(f"# HELP node_metric_{i} a series no field reads\nnode_metric_{i} {40 + i}"
                     for i in range(4)) + "\n"
    for at in range(1, len(base) - 1):
        text = base[:at] + odd + base[at:]
        walked = _dcgm_walk.walk_text(text, {}, lambda _series: None, {}, {}, {}, {}, {})
        assert walked[1] == len(text.splitlines()), (at, text)
    for at in range(0, 17):  # near the start of a text of one long line
        text = "#" + "x" * at + odd + "y" * 40
        assert _dcgm_walk.walk_text(text, {}, lambda _series: None, {}, {}, {}, {}, {})[1] == len(text.splitlines())


def test_a_line_without_labels_or_value():
    for text in ("DCGM_FI_DEV_GPU_UTIL 5\n", "DCGM_FI_DEV_GPU_UTIL\n", "DCGM_FI_DEV_GPU_TEMP 40\n",
                 "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\"} 5 6 7\n", "x{}} 1\n", "}{ 1\n"):
        c, py = _both(text)
        assert c == py, text


def _samples_both(per_gpu: dict, models: dict, pod_values: dict) -> tuple:
    keys = sorted(per_gpu, key=dcgm._device_order)
    out = []
    for build in (lambda: _dcgm_walk.samples(keys, per_gpu, models, pod_values, dcgm._per_pod, dcgm.DeviceSample),
                  lambda: dcgm_reference._samples(keys, per_gpu, models, pod_values)):
        try:
            got = build()
            out.append(("built", got if got is None else [_fields(x) for x in got]))  # nan, -0.0
        except Exception as exc:  # noqa: BLE001 — the error is the outcome compared
            out.append(("raises", type(exc).__name__, str(exc)))
    return tuple(out)


_FIELD_VALUES = [0.0, -0.0, 0.5, 1.0, 1.5, -0.25, 100.0, 250.0, 1e-300, float("nan"), float("inf"), -float("inf"),
                 1073741823.9, 0.1]


def test_samples_from_every_field_value_and_mix():
    """The samples built in C equal the reference's, field by field and in the dataclass's
    order, for each mix of fields and each value the walk can hand over (and a value it never
    hands over, an int: C declines, the reference builds)."""
    rng = random.Random(5)
    names = list(dcgm._FIELDS.values())
    for _ in range(3000):
        per_gpu, models, pod_values = {}, {}, {}
        for g in range(rng.randrange(1, 5)):
            key = (f"GPU-{rng.randrange(3)}", rng.choice([None, 0, 1, 7]))
            per_gpu[key] = {n: rng.choice(_FIELD_VALUES) for n in rng.sample(names, rng.randrange(0, len(names) + 1))}
            models[key] = rng.choice(["NVIDIA H100 80GB HBM3", "GRID A100-40C", ""])
            if rng.random() < 0.4:
                field = rng.choice(["sm_active", "gr_active", "gpu_util_pct"])
                pods = {("ns", f"p{i}"): rng.choice([0.2, 0.2, 0.7, 1.3]) for i in range(rng.randrange(1, 4))}
                pod_values[key] = {field: pods}
        if rng.random() < 0.05:
            key = next(iter(per_gpu))
            per_gpu[key]["power_w"] = rng.choice([5, True, "5"])
        c, py = _samples_both(per_gpu, models, pod_values)
        if c == ("built", None):  # declined: a value that is not a float
            assert any(type(v) is not float for f in per_gpu.values() for v in f.values())
            continue
        assert c == py, (per_gpu, pod_values)


def test_samples_refuse_as_the_reference_does():
    for fields in ({"fb_used_mib": float("inf")}, {"fb_used_mib": float("nan")}):
        c, py = _samples_both({("GPU-a", None): fields}, {("GPU-a", None): ""}, {})
        assert c == py and c[0] == "raises"
    c, py = _samples_both({("GPU-a", None): {}}, {}, {})
    assert c[0] == py[0] == "raises" and c[1] == py[1] == "KeyError"


def test_samples_of_a_class_without_slots_are_built_with_their_dict():
    """A DeviceSample keeps its fields in slots, and C sets them; a sample class of the same
    fields without slots is built as ``built`` builds one: its __dict__, in the fields' order."""
    from dataclasses import MISSING, field, fields, make_dataclass

    DictSample = make_dataclass("DictSample", [(f.name, f.type) if f.default is MISSING else
                                               (f.name, f.type, field(default=f.default))
                                               for f in fields(dcgm.DeviceSample)], frozen=True)
    assert "__slots__" not in vars(DictSample) and [f.name for f in fields(DictSample)] == list(dcgm._SAMPLE_FIELDS)
    per_gpu = {("GPU-a", None): {"sm_active": 0.5, "fb_used_mib": 2.0, "energy_mj": 5.0}, ("GPU-b", 3): {}}
    models = {("GPU-a", None): "H100", ("GPU-b", 3): ""}
    keys = sorted(per_gpu, key=dcgm._device_order)
    slotted = _dcgm_walk.samples(keys, per_gpu, models, {}, dcgm._per_pod, dcgm.DeviceSample)
    plain = _dcgm_walk.samples(keys, per_gpu, models, {}, dcgm._per_pod, DictSample)
    assert [type(s) for s in plain] == [DictSample, DictSample]
    assert [list(vars(s)) for s in plain] == [list(dcgm._SAMPLE_FIELDS)] * 2
    assert [list(vars(s).values()) for s in plain] == [dcgm.row_of(s) for s in slotted]
    assert not any(hasattr(s, "__dict__") for s in slotted)
    assert slotted[0].fb_used_bytes == 2 * 1024 * 1024 and slotted[1].sm_active_ratio is None


def _sharing_scrape(rng: random.Random) -> str:
    """A scrape whose devices' ratio series come once, or once per sharing pod (time-slicing), the
    same pod again, a second pod on one field only, pods on some fields and not others, MIG
    instances, values equal or not, label sets that differ only in their order, and more devices
    than the walk remembers at once."""
    lines = []
    fields = ["DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL",
              "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"]
    for d in range(rng.choice([1, 3, 8, 24])):
        uuid = f"GPU-{d}"
        instance = f',GPU_I_ID="{rng.randrange(3)}",GPU_I_PROFILE="1g.10gb"' if rng.random() < 0.2 else ""
        for name in rng.sample(fields, rng.randrange(1, len(fields) + 1)):
            pods = rng.choice([[], [0], [0, 0], [0, 1], [0, 1, 2], [1, 0, 1]])
            for p in pods or [None]:
                value = rng.choice(["0.25", "0.5", "0.75", "25", "50"])
                labels = [f'gpu="{d}"', f'UUID="{uuid}"']
                if p is not None:
                    labels += [f'namespace="ns{p % 2}"', f'pod="job-{p}"']
                if rng.random() < 0.3:
                    labels.reverse()  # another label text, an equal device
                lines.append(f"{name}{{{','.join(labels)}{instance}}} {value}")
    if rng.random() < 0.3:
        rng.shuffle(lines)
    return "\n".join(lines) + "\n"


def test_per_pod_evidence_of_sharing_pods_every_way():
    rng = random.Random(23)
    shared = 0
    for _ in range(1500):
        text = _sharing_scrape(rng)
        c, py = _both(text)
        assert c == py, text
        assert c[0][0] == "parses"
        shared += sum(1 for s in c[0][1] if s.per_pod)
    assert shared > 300  # many devices with per-pod evidence, many without


def test_the_devices_in_c_take_every_scrape_the_exporter_writes():
    """walk_samples answers (not None: no walk again into dicts) for real and generated scrapes."""
    texts = [p.read_text() for p in sorted(FIXTURES.glob("*.txt"))] + _fleet_texts(8, 3)
    rng = random.Random(29)
    texts += [_sharing_scrape(rng) for _ in range(50)]
    for text in texts:
        _fresh_caches()
        got = _dcgm_walk.walk_samples(text, dcgm._SERIES.young, dcgm._SERIES.from_old, {}, {}, dcgm._per_pod,
                                      dcgm.DeviceSample)
        assert got is not None and len(got) == 3, text[:200]
    _fresh_caches()


_ODD = [  # series infos no cache of the walk holds: (field, key, pod, ratio?)
    ("custom_field", ("GPU-z", None), None, False),
    ("power_w", ("GPU-z", -1), None, False),
    ("power_w", ("GPU-z", True), None, False),
    ("power_w", ["GPU-z", None], None, False),
    ("power_w", ("GPU-z", None, 1), None, False),
    ("fb_used_mib", ("GPU-z", None), ("ns", "p"), True),
    ("sm_active", ("GPU-z", None), ["ns", "p"], True),
]


@pytest.mark.parametrize("odd", _ODD)
def test_a_value_the_devices_do_not_hold_is_walked_again_into_dicts(odd):
    """A series info the devices in C do not hold (a field not among the six, a key other than
    (UUID, None or an instance >= 0), a pod that is not a tuple on a ratio field): walk_samples
    declines, and the parse walks the scrape again into dicts, from empty health readings and
    skip counts, to the outcome of the walk into dicts."""
    field, key, pod, ratio = odd
    odd_info = (field, key, "", "", pod, -math.inf, math.inf, "", ratio, None)
    fleet = _fleet_texts(1, 5)[0].splitlines()
    text = "\n".join([*fleet[:12], "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",UUID=\"GPU-h\"} 41", "DCGM_FI_DEV_SM_CLOCK 1",
                      'ODD{x="1"} 5', *fleet[12:]]) + "\n"
    out = {}
    for path in ("devices in C", "dicts in C"):
        _fresh_caches()
        dcgm._SERIES.young['ODD{x="1"}'] = odd_info
        if path == "devices in C":
            assert _dcgm_walk.walk_samples(text, dcgm._SERIES.young, dcgm._SERIES.from_old, {}, {}, dcgm._per_pod,
                                           dcgm.DeviceSample) is None
        out[path] = _outcome(text, path)
    _fresh_caches()
    assert out["devices in C"] == out["dicts in C"]
    if out["dicts in C"][0] == "parses":
        assert out["dicts in C"][5] and out["dicts in C"][4].get("not an attribution field: DCGM_FI_DEV_SM_CLOCK") == 1


def _sourced(texts: list[str], source) -> list[tuple]:
    """Each text parsed in turn as a scrape of ``source`` (None: of no source), as the walk with
    the devices in C parses it: the outcomes compared."""
    out = []
    for text in texts:
        try:
            parsed = dcgm.parse_exposition(text, source)
        except Exception as exc:  # noqa: BLE001 — the error is the outcome compared
            out.append(("raises", type(exc).__name__, str(exc)))
            continue
        out.append(("parses", [_fields(s) for s in parsed.samples], parsed.series_parsed, parsed.skipped,
                    parsed.health))
    return out


def _with_and_without(texts: list[str]) -> tuple[list, list]:
    """The texts as one source's scrapes, then as scrapes of no source, each from fresh caches."""
    _fresh_caches()
    dcgm._TEMPLATES.clear()
    sourced = _sourced(texts, ("c1", "node-1"))
    _fresh_caches()
    plain = _sourced(texts, None)
    return sourced, plain


def _node_texts(n: int, seed: int) -> list[str]:
    """One generated node's scrapes, one after another (values change, series stay)."""
    plan = fleet_plan(8, 1, 10, 10)
    node = next(iter(plan.nodes))
    gen = _Node(plan, node, [p for p in plan.pods if p.node == node], random.Random(seed))
    return [gen.scrape(plan.start_ms + i * 10_000)[0] for i in range(n)]


def test_a_scrape_met_with_its_nodes_last_one_parses_as_without():
    texts = _node_texts(12, 7)
    sourced, plain = _with_and_without(texts)
    assert sourced == plain and all(o[0] == "parses" and len(o[1]) == 8 for o in sourced)
    template = dcgm._TEMPLATES[("c1", "node-1")]
    series = sum(1 for line in texts[-1].splitlines() if line and not line.startswith("#"))
    assert template.lines() == len(texts[-1].splitlines()) and template.met() == series  # every series met


def test_scrapes_whose_lines_change_between_them_parse_as_without():
    """Series come and go between a node's scrapes (pods start and end, a field appears, lines
    reorder, a value is spoiled, the line breaks change), so the lines of the last scrape meet
    other series: each scrape parses as it does with no template."""
    rng = random.Random(31)
    base = _node_texts(30, 11)
    for _ in range(60):
        texts = []
        for text in rng.sample(base, 6):
            lines = text.splitlines()
            change = rng.choice(["none", "drop", "insert", "swap", "spoil", "crlf", "shared", "bad"])
            if change == "drop":
                del lines[rng.randrange(len(lines))]
            elif change == "insert":
                lines.insert(rng.randrange(len(lines)), f"{rng.choice(_NAMES)}{rng.choice(_LABELS)} "
                                                        f"{rng.choice(_VALUES)}")
            elif change == "swap":
                i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
                lines[i], lines[j] = lines[j], lines[i]
            elif change == "spoil":
                i = rng.randrange(len(lines))
                if not lines[i].startswith("#"):
                    lines[i] = lines[i].rsplit(" ", 1)[0] + " " + rng.choice(_VALUES)
            elif change == "shared":
                lines = _sharing_scrape(rng).splitlines()
            elif change == "bad":
                lines.append('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a" 5')
            texts.append(("\r\n" if change == "crlf" else "\n").join(lines) + "\n")
        sourced, plain = _with_and_without(texts)
        assert sourced == plain, texts
    _fresh_caches()


def test_the_template_holds_only_what_a_walk_that_ended_well_met():
    texts = _node_texts(3, 13)
    _fresh_caches()
    dcgm._TEMPLATES.clear()
    source = ("c1", "node-1")
    dcgm.parse_exposition(texts[0], source)
    template = dcgm._TEMPLATES[source]
    held = template.lines()
    assert held > 0 and template.met() == 0  # the first scrape meets nothing
    with pytest.raises(ValueError, match="unterminated"):  # a scrape refused leaves the template as it was
        dcgm.parse_exposition(texts[1] + 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a" 5\n', source)
    assert template.lines() == held and template.met() > 0
    dcgm.parse_exposition(texts[2], source)
    assert template.met() == sum(1 for line in texts[2].splitlines() if line and not line.startswith("#"))


def test_a_template_of_another_cache_generation_meets_nothing():
    texts = _node_texts(2, 17)
    template = _dcgm_walk.Template()

    def walk(text: str):
        return _dcgm_walk.walk_samples(text, dcgm._SERIES.young, dcgm._SERIES.from_old, {}, {}, dcgm._per_pod,
                                       dcgm.DeviceSample, template)

    for _ in range(2):  # the second time, another generation: the series the template holds are not the cache's
        _fresh_caches()
        assert walk(texts[0]) is not None and template.met() == 0 and template.lines() > 0
    assert walk(texts[1]) is not None and template.met() > 0  # the same generation: met
    with pytest.raises(TypeError, match="Template"):
        _dcgm_walk.walk_samples(texts[1], {}, lambda _s: None, {}, {}, dcgm._per_pod, dcgm.DeviceSample, object())
    _fresh_caches()


def test_the_templates_go_when_the_caches_rotate():
    _fresh_caches()
    dcgm._TEMPLATES.clear()
    for i, text in enumerate(_node_texts(3, 19)):
        dcgm.parse_exposition(text, ("c1", f"node-{i}"))
    assert len(dcgm._TEMPLATES) == 3
    dcgm._age_caches(10**9)  # a generation's lines and more: the caches rotate
    assert dcgm._TEMPLATES == {}
    _fresh_caches()


def test_a_walk_begun_inside_another_walks_without_the_template_the_outer_one_holds():
    """A helper the walk calls (here the old generation's lookup) may walk a scrape itself. That
    inner walk must not touch the template the outer one is meeting lines with (it would free
    them under it): it walks without it, and the template is the outer walk's when that ends."""
    first, outer_text = _node_texts(2, 23)
    inner_text = "\n".join(outer_text.splitlines()[:7]) + "\n"
    template = _dcgm_walk.Template()
    _fresh_caches()
    assert _dcgm_walk.walk_samples(first, dcgm._SERIES.young, dcgm._SERIES.from_old, {}, {}, dcgm._per_pod,
                                   dcgm.DeviceSample, template) is not None
    held = template.lines()
    seen = []

    def from_old(series):
        if not seen:  # once: a walk inside the outer one, with the same template
            inner = _dcgm_walk.walk_samples(inner_text, dcgm._SERIES.young, dcgm._SERIES.from_old, {}, {},
                                            dcgm._per_pod, dcgm.DeviceSample, template)
            seen.append((inner is not None, template.lines()))
        return dcgm._SERIES.from_old(series)

    _fresh_caches()  # another generation: the outer walk's lines go to from_old
    outer = _dcgm_walk.walk_samples(outer_text, dcgm._SERIES.young, from_old, {}, {}, dcgm._per_pod,
                                    dcgm.DeviceSample, template)
    assert seen == [(True, held)]  # the inner walk answered, and left the template as it was
    assert outer is not None and template.lines() == len(outer_text.splitlines())
    _fresh_caches()
