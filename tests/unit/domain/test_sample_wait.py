"""Which of a node's queued scrapes a pass attributes and which wait: the walk over the queue stops
at the first scrape that is neither final nor past the grace, and only there (a scrape before
the node's latest snapshot waits inside the grace while a later one goes)."""

from gpuledger.domain.attribution import Attributor
from gpuledger.domain.dcgm import DeviceSample
from gpuledger.domain.segments import NodeState

GRACE_MS = 120_000
T = 1_788_000_000_000


def _scrape(t: int, end: int | None) -> list:
    return [t, [DeviceSample("GPU-1", None, 0.5, 1, 100.0, 1.0)], ["dcgm", 0, t // 1000], end]


def _pass(st: NodeState, pr_watermark_ms: int) -> list[tuple[int, str]]:
    att = Attributor("c1", 300_000, GRACE_MS)
    att.pr_watermark_ms = pr_watermark_ms
    att._attribute_samples("node-1", st)
    return [(f.observed_at_ms, f.reason) for f in att._util_out]


def _node(last_ms: int | None, *scrapes: list) -> NodeState:
    st = NodeState(last_ms=last_ms, first_snapshot_ms=None if last_ms is None else T - 3_600_000,
                   final_until_ms=T - 3_600_000)
    st.pending_scrapes = list(scrapes)
    st.dcgm_wm_ms = scrapes[-1][0]
    return st


def test_a_scrape_exactly_a_grace_behind_the_watermark_goes_and_one_a_millisecond_later_waits():
    why = "no PodResources snapshot of node-1 within 120s grace"
    st = _node(None, _scrape(T, T + 10_000), _scrape(T + 10_000, T + 20_000), _scrape(T + 20_000, None))
    assert _pass(st, T + GRACE_MS) == [(T, why)]
    assert [s[0] for s in st.pending_scrapes] == [T + 10_000, T + 20_000]
    assert _pass(st, T + 10_000 + GRACE_MS - 1) == []
    assert [s[0] for s in st.pending_scrapes] == [T + 10_000, T + 20_000]


def test_a_scrape_before_the_latest_snapshot_waits_inside_the_grace_and_a_later_one_goes():
    why = "no PodResources snapshot of node-1 within 120s grace"
    st = _node(T + 5_000, _scrape(T, T + 10_000), _scrape(T + 10_000, T + 20_000))
    assert _pass(st, T + 10_000 + GRACE_MS) == [(T + 10_000, why)]
    assert [s[0] for s in st.pending_scrapes] == [T]


def test_a_later_scrape_that_is_final_goes_while_one_whose_end_runs_past_it_waits():
    """A scrape ended a cadence after a silence can end past the next one's time (the node's
    scrapes came late): the walk goes on past it to the next, final one."""
    st = _node(T - 3_600_000, _scrape(T, T + 30_000), _scrape(T + 10_000, T + 20_000), _scrape(T + 20_000, None))
    st.final_until_ms, st.open = T + 25_000, True  # (its snapshots go on)
    assert [t for t, _ in _pass(st, T + 10_000)] == [T + 10_000]
    assert [s[0] for s in st.pending_scrapes] == [T, T + 20_000]
