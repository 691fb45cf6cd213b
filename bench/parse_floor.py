"""What a DCGM scrape costs in native code at the least, parsed and then made into its facts:
``python -m gpuledger.bench.parse_floor --gpus 1024 --hours 0.25 --reps 10``.

The scrapes of a generated fleet (bench/fleet_gen.py) are written one after the other to a
file; bench/parse_floor.c, built with the C compiler here (``cc -O2``) once per set of steps,
splits their lines, hashes each series and reads its value, keeps each value in its device's
slot, and makes each device's utilization and health facts (ids and Avro bodies, in batch
records), reporting microseconds per scrape after each step. Set beside the raw loop of the
fleet bench (microseconds per device sample, times the devices a scrape holds), it says what
share of a worker's budget a native per-scrape path would take at the least;
``parse_exposition`` (domain/dcgm.py, its walk in C over Python objects) is timed on the same
scrapes, each node's last scrape its template as in a worker.
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

__all__ = ["STEPS", "main", "native", "node_of", "scrapes"]

SOURCE = Path(__file__).with_name("parse_floor.c")
STEPS = {"split lines": [], "+ read values": ["-DVALUE"], "+ hash series, 8 bytes a step": ["-DVALUE", "-DHASH_WORDS"],
         "+ hash series, a byte a step": ["-DVALUE", "-DHASH_BYTES"],
         "+ values kept in their device's slot (series found by hash)": ["-DVALUE", "-DHASH_WORDS", "-DDEVICES"],
         "+ each device's utilization and health facts (ids, Avro bodies, batch records)":
             ["-DVALUE", "-DHASH_WORDS", "-DDEVICES", "-DFACTS", "-lcrypto"]}


def scrapes(gpus: int, hours: float, cadence_s: float) -> list[str]:
    """The DCGM expositions of a generated fleet, in publish order."""
    plan = fleet_plan(gpus, hours, cadence_s, cadence_s)
    topics = Topics("floor", 4, 30)
    pub = MemoryPublisher()
    publish_fleet(plan, pub, topics, lambda _m: None)
    codec = Codec(topics.dcgm.schema)
    return [codec.decode(v)["exposition"] for t, _, v in pub.records if t == topics.dcgm.name]


def node_of(text: str) -> str:
    """The node a generated scrape is of (its series' Hostname label)."""
    at = text.find('Hostname="')
    return "" if at < 0 else text[at + 10:text.index('"', at + 10)]


def native(texts: list[str], flags: list[str], reps: int, tmp: Path,
           dump: Path | None = None) -> tuple[float, float, float]:
    """(microseconds a scrape, series a scrape, facts a scrape) of parse_floor.c built with ``flags``
    over ``texts``. ``dump``: where a build that makes facts writes its last batch records
    (``dump.utilization``, ``dump.health``)."""
    data, exe = tmp / "scrapes.txt", tmp / "floor"
    if not data.exists():
        texts = [t if t.endswith("\n") else t + "\n" for t in texts]
        data.write_text("".join(texts))
        data.with_suffix(".txt.len").write_text("".join(f"{len(t.encode())}\n" for t in texts))
    cc = os.environ.get("CC", "cc")
    libs = [f for f in flags if f.startswith("-l")]
    built = subprocess.run([cc, "-O2", *[f for f in flags if f not in libs], "-o", str(exe), str(SOURCE), *libs],
                           capture_output=True, text=True)
    if built.returncode:
        raise RuntimeError(f"{cc} could not build {SOURCE}: {built.stderr.strip()} (set CC to a C compiler)")
    out = subprocess.run([str(exe), str(data), str(len(texts)), str(reps), *([str(dump)] if dump else [])],
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[2]), float(out[4]) if len(out) > 4 else 0.0


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
                us, series, facts = native(texts, flags, args.reps, Path(tmp))
            except RuntimeError as exc:
                print(exc, file=sys.stderr)
                return 1
            print(f"native, {step}: {us:.2f} us a scrape ({series:g} series{f', {facts:g} facts' if facts else ''})")
    sources = [("floor", node_of(text)) for text in texts]  # each node's last scrape its template, as in a worker
    for text, source in zip(texts, sources):  # warm: the walk's caches filled, as in a running worker
        parse_exposition(text, source)
    t0 = time.perf_counter()
    for _ in range(3):
        for text, source in zip(texts, sources):
            parse_exposition(text, source)
    print(f"parse_exposition: {(time.perf_counter() - t0) / 3 / len(texts) * 1e6:.2f} us a scrape")
    return 0


if __name__ == "__main__":
    sys.exit(main())
