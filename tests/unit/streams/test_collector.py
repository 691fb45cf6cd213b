"""The data path's collector thresholds (streams/collector.py): young collections are rarer than
the interpreter's default, and reference cycles are still collected without anyone asking."""

import gc
import weakref

from gpuledger.streams.collector import DATA_PATH_THRESHOLDS, collect_for_the_data_path


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: reference counting alone never frees it


def test_thresholds_are_set_and_cycles_are_still_collected():
    before = gc.get_threshold()
    try:
        collect_for_the_data_path()
        assert gc.get_threshold() == DATA_PATH_THRESHOLDS
        assert DATA_PATH_THRESHOLDS[0] > before[0]
        gc.collect()
        alive = weakref.WeakSet()
        for _ in range(400_000):
            alive.add(Node())
        # 400,000 cyclic objects made, none referenced: the collector ran on its own and freed
        # nearly all; at most what was allocated since its last young collection is still there
        assert len(alive) <= 2 * DATA_PATH_THRESHOLDS[0]
    finally:
        gc.set_threshold(*before)
