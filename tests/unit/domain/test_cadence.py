"""A sample stands until the next one from its source, within 4 of the source's own recent
intervals (never over the ceiling); an outage is not learnt as cadence."""

from gpuledger.domain.cadence import Cadence, sample_end_ms

CEILING_MS = 300_000


def test_until_the_next_sample_when_it_comes_in_time():
    c = Cadence()
    assert c.step(0, 30_000, CEILING_MS) == 30_000  # no cadence yet: the ceiling is the limit
    assert c.step(30_000, 90_000, CEILING_MS) == 90_000  # a missed scrape: still within 4 x 30 s
    assert c.intervals_ms == [30_000, 60_000] and c.median_ms() == 60_000  # upper median of two
    assert c.stale_after_ms(CEILING_MS) == 4 * 60_000


def test_a_late_next_sample_leaves_one_cadence_and_a_gap():
    c = Cadence([30_000] * 5)
    assert c.stale_after_ms(CEILING_MS) == 120_000
    assert c.step(0, 121_000, CEILING_MS) == 30_000  # one cadence; the rest is a gap
    assert c.intervals_ms == [30_000] * 5  # the outage is not learnt
    assert sample_end_ms(c, 0, None, CEILING_MS) == 30_000  # a source that stopped: one cadence


def test_the_ceiling_bounds_slow_sources_and_nothing_is_guessed():
    c = Cadence([3_600_000] * 3)
    assert c.stale_after_ms(CEILING_MS) == CEILING_MS
    assert sample_end_ms(Cadence(), 0, 400_000, CEILING_MS) == 0  # beyond the ceiling, no cadence known: nothing


def test_the_median_ignores_one_off_outliers_and_the_window_is_bounded():
    c = Cadence()
    t = 0
    for interval in [10_000] * 20 + [50_000] + [10_000] * 3:
        c.step(t, t + interval, CEILING_MS)
        t += interval
    assert c.median_ms() == 10_000 and len(c.intervals_ms) == 9


def test_the_median_follows_every_step_it_is_asked_between():
    """The median is worked out once per learnt interval: asked between steps (cached) it is
    always the median of the intervals as they stand, and a cadence restored from them agrees."""
    import random

    rng = random.Random(7)
    c = Cadence()
    t = 0
    for _ in range(2_000):
        nxt = t + rng.choice([5_000, 10_000, 10_000, 30_000, 60_000, 400_000])
        c.step(t, nxt, CEILING_MS)
        t = nxt
        ordered = sorted(c.intervals_ms)
        expect = ordered[len(ordered) // 2] if ordered else None
        assert c.median_ms() == expect == Cadence(list(c.intervals_ms)).median_ms()
        assert c.stale_after_ms(CEILING_MS) == (CEILING_MS if expect is None else min(CEILING_MS, 4 * expect))


def test_a_restored_window_longer_than_kept_follows_as_well():
    """Intervals restored from state may be more than the window keeps: the sorted copy drops
    them all on the next interval learnt, as the window does (a plain list kept beside it is
    the reference: the learnt interval appended, the window's last nine kept)."""
    import random

    rng = random.Random(11)
    for _ in range(300):
        window = [rng.choice([9_000, 10_000, 11_000, 30_000]) for _ in range(rng.randrange(0, 14))]
        c = Cadence(list(window))
        t = 0
        for _ in range(rng.randrange(1, 12)):
            nxt = t + rng.choice([9_000, 10_000, 10_500, 200_000])
            if c.step(t, nxt, CEILING_MS) == nxt:
                window = (window + [nxt - t])[-9:]
            t = nxt
            ordered = sorted(window)
            assert c.intervals_ms == window
            assert c.median_ms() == (ordered[len(ordered) // 2] if ordered else None)


def test_a_step_is_the_sample_end_and_the_window_of_the_reference():
    """``step`` works the end and the median out in place: over random intervals (in time, late,
    right at one cadence past the limit, with ceilings below and above the cadence) it answers
    ``sample_end_ms`` as asked before the step, and learns the interval exactly where that end
    is the next sample."""
    import random

    rng = random.Random(5)
    for _ in range(400):
        ceiling = rng.choice([5_000, 30_000, CEILING_MS])
        window = [rng.choice([5_000, 10_000, 20_000, 60_000]) for _ in range(rng.randrange(0, 12))]
        c, t = Cadence(list(window)), 0
        for _ in range(rng.randrange(1, 15)):
            ordered = sorted(window)
            median = ordered[len(ordered) // 2] if ordered else None
            gap = rng.choice([1, 5_000, 10_000, 20_000, 45_000, 80_000, 400_000] + ([median] if median else []))
            expect = sample_end_ms(Cadence(list(window)), t, t + gap, ceiling)
            assert c.step(t, t + gap, ceiling) == expect
            if expect == t + gap:
                window = (window + [gap])[-9:]
            assert c.intervals_ms == window and c.median_ms() == Cadence(list(window)).median_ms()
            t += gap
