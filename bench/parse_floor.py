"""What parsing a DCGM scrape costs in native code at the least: ``python -m
gpuledger.bench.parse_floor --gpus 64 --hours 0.5``.

The scrapes of a generated fleet (bench/fleet_gen.py) are written one after the other to a
file; bench/parse_floor.c, built with the C compiler here (``cc -O2``) once per set of steps,
splits their lines, hashes each series and reads its value, and reports microseconds per
scrape. Set beside the raw loop of the fleet bench (microseconds per device sample, times the
devices a scrape holds), it says what share of a worker's budget the parse alone would take
if it were native; ``parse_exposition`` (domain/dcgm.py, its walk in C over Python objects) is
timed on the same scrapes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuledger.bench.fleet_gen import fleet_plan, publish_fleet
from gpuledger.bench.hotpath import MemoryPublisher
from gpuledger.bus.topics import Topics
from gpuledger.domain.dcgm import parse_exposition
from gpuledger.schemas import Codec

__all__ = ["STEPS", "main", "native", "scrapes"]

SOURCE = Path(__file__).with_name("parse_floor.c")
STEPS = {"split lines": [], "+ read values": ["-DVALUE"], "+ hash series, 8 bytes a step": ["-DVALUE", "-DHASH_WORDS"],
         "+ hash series, a byte a step": ["-DVALUE", "-DHASH_BYTES"]}


def scrapes(gpus: int, hours: float, cadence_s: float) -> list[str]:
    """The DCGM expositions of a generated fleet, in publish order."""
    plan = fleet_plan(gpus, hours, cadence_s, cadence_s)
    topics = Topics("floor", 4, 30)
    pub = MemoryPublisher()
    publish_fleet(plan, pub, topics, lambda _m: None)
    codec = Codec(topics.dcgm.schema)
    return [codec.decode(v)["exposition"] for t, _, v in pub.records if t == topics.dcgm.name]


def native(texts: list[str], flags: list[str], reps: int, tmp: Path) -> tuple[float, float]:
    """(microseconds a scrape, series a scrape) of parse_floor.c built with ``flags`` over ``texts``."""
    data, exe = tmp / "scrapes.txt", tmp / "floor"
    if not data.exists():
        data.write_text("".join(t if t.endswith("\n") else t + "\n" for t in texts))
    cc = os.environ.get("CC", "cc")
    built = subprocess.run([cc, "-O2", *flags, "-o", str(exe), str(SOURCE)], capture_output=True, text=True)
    if built.returncode:
        raise RuntimeError(f"{cc} could not build {SOURCE}: {built.stderr.strip()} (set CC to a C compiler)")
    out = subprocess.run([str(exe), str(data), str(len(texts)), str(reps)], capture_output=True, text=True,
                         check=True).stdout.split()
    return float(out[0]), float(out[2])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpuledger.bench.parse_floor", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=64, help="GPUs (a multiple of 8)")
    p.add_argument("--hours", type=float, default=0.5)
    p.add_argument("--cadence-s", type=float, default=10.0)
    p.add_argument("--reps", type=int, default=50, help="passes over the scrapes per build")
    args = p.parse_args(argv)
    texts = scrapes(args.gpus, args.hours, args.cadence_s)
    if not texts:
        p.error("the fleet made no scrapes: more --gpus or --hours")
    print(f"{len(texts)} scrapes of {args.gpus} GPUs, {sum(map(len, texts)) / len(texts) / 1024:.1f} KiB each")
    with tempfile.TemporaryDirectory() as tmp:
        for step, flags in STEPS.items():
            try:
                us, series = native(texts, flags, args.reps, Path(tmp))
            except RuntimeError as exc:
                print(exc, file=sys.stderr)
                return 1
            print(f"native, {step}: {us:.2f} us a scrape ({series:g} series)")
    for text in texts:  # warm: the walk's caches filled, as in a running worker
        parse_exposition(text)
    t0 = time.perf_counter()
    for _ in range(3):
        for text in texts:
            parse_exposition(text)
    print(f"parse_exposition: {(time.perf_counter() - t0) / 3 / len(texts) * 1e6:.2f} us a scrape")
    return 0


if __name__ == "__main__":
    sys.exit(main())
