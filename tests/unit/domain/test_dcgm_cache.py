"""The exposition parser's caches hold the series in use, not every series a day of pod churn
has shown (domain/dcgm.py ``_Generations``): what the worker holds does not grow with the
hours read, and a cached parse equals a cold one."""

from gpuledger.domain import dcgm
from gpuledger.domain.dcgm import parse_exposition

FIELDS = ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE",
          "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS")
GPUS = 4


def scrape(pod_of_gpu: list[str], step: int) -> str:
    lines = []
    for field in FIELDS:
        lines.append(f"# TYPE {field} gauge")
        for g, pod in enumerate(pod_of_gpu):
            labels = (f'gpu="{g}",UUID="GPU-cache-{g}",pci_bus_id="00000000:{g:02d}:00.0",device="nvidia{g}",'
                      f'modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",container="main",namespace="ns",pod="{pod}"')
            lines.append(f"{field}{{{labels}}} {(step * 7 + g) % 100 / 100 + 1}")
    return "\n".join(lines) + "\n"


def cached_entries() -> int:
    return sum(len(c.young) + len(c.old) for c in (dcgm._SERIES, dcgm._LABELS, dcgm._HEALTH))


def cold(text: str):
    for c in (dcgm._SERIES, dcgm._LABELS, dcgm._HEALTH):
        c.young, c.old = {}, {}
    return parse_exposition(text)


def test_pod_churn_does_not_grow_the_caches():
    """Every scrape names new pods: without generations the caches would hold every series ever
    seen (3,000 scrapes x 24 series, x2 for the label caches); with them, the last one or two."""
    cold("")
    scrapes = 3_000
    for step in range(scrapes):
        parse_exposition(scrape([f"job-{step}-{g}" for g in range(GPUS)], step))
    seen = scrapes * GPUS * len(FIELDS)
    assert cached_entries() < seen // 2, (cached_entries(), seen)


def test_series_in_use_stay_cached_across_generations():
    cold("")
    pods = [f"steady-{g}" for g in range(GPUS)]
    first = parse_exposition(scrape(pods, 0))
    for step in range(1, 2_000):  # ~16 generations of 1,024-entry floors at 24 lines a scrape: several rotations
        parse_exposition(scrape(pods, step))
    assert len(dcgm._SERIES.young) + len(dcgm._SERIES.old) <= 2 * GPUS * len(FIELDS)
    assert parse_exposition(scrape(pods, 0)) == first  # a cached parse of the same text gives the same result


def test_a_cached_parse_equals_a_cold_one_across_rotations():
    cold("")
    for step in range(1_500):
        pods = [f"job-{step // 50}-{g}" for g in range(GPUS)]  # pods change every 50 scrapes
        text = scrape(pods, step)
        warm = parse_exposition(text)
        if step % 97 == 0:
            young = dict(dcgm._SERIES.young), dict(dcgm._SERIES.old)
            assert cold(text) == warm and cold(text).health == warm.health
            dcgm._SERIES.young, dcgm._SERIES.old = young
