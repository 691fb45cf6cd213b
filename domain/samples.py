"""Sample attribution, the part of ``Attributor`` (domain/attribution.py) that turns waiting
DCGM samples into utilization facts once the segments under them are final: one fact per
capacity fact a sample's ``[t, end)`` overlaps (span = the overlap), or one unattributed fact
saying why. Also what the attributor forgets: pieces no sample can need, evidence gaps past
the allowed lateness, history behind the late-data horizon. All times epoch ms, half-open.
A ready scrape's samples of exclusive GPUs are attributed in C where it is built
(domain/_samples.c ``exclusive_facts``, held to ``_emit_sample`` by tests), the others here."""

from __future__ import annotations

from functools import partial

from gpuledger.domain.capacity import Piece
from gpuledger.domain.dcgm import DeviceSample
from gpuledger.domain.facts import SourcePos, source_pos
from gpuledger.domain.segments import NEG_INF, POS_INF, NodeState
from gpuledger.domain.utilization import lookup, overlapping, sample_targets, utilization_body, utilization_fact

__all__ = ["SampleAttribution", "drop_before"]


class SampleAttribution:
    """Mixed into ``Attributor``: uses its nodes, hosts, watermarks and fact buffers.

    ``encoded``: the utilization facts of exclusive GPUs' samples go out as their Avro bodies
    (bytes, as streams/fact_batches.py writes them) wherever the writer is sure of every value,
    instead of as facts: what a worker does, which only writes them to the fact topics. The
    others (MIG, time-sliced and vGPU devices, a value the writer refuses) stay facts.
    """

    encoded = False

    def _attribute_guest_samples(self) -> None:
        keep = []
        src = self.guest_source
        for scrape in self.guest_pending:
            t, s, pos, node, end = scrape
            vgpu = s.gpu_uuid
            host = src.vgpu_index.get(vgpu)
            st = src.vgpu_hosts.get(host) if host else None
            if end is not None and st is not None and st.first_snapshot_ms is not None \
                    and st.first_snapshot_ms <= t and self._known(st, t, end):
                pieces = {vgpu: st.pieces.get(vgpu, [])}
                covered = overlapping(pieces[vgpu], t, end)
                why = "" if covered else ("no vGPU evidence (snapshot gap)" if any(a <= t < b for a, b in st.gaps)
                                          else f"vGPU {vgpu} not in the snapshot covering this sample")
                self._emit_targets(node, t, end, s, SourcePos(*pos), [(vgpu, lookup(pieces[vgpu], t), why)], "",
                                   pieces)
            elif end is not None and t + self.node_grace_ms <= src.vgpu_watermark_ms and (
                    st is None or st.last_ms is None or t >= st.last_ms):
                why = f"no vGPU snapshot names {vgpu} within {self.node_grace_ms // 1000}s grace"
                self._emit_targets(node, t, end, s, SourcePos(*pos), [(vgpu, None, why)], "", {})
            else:
                keep.append(scrape)
        self.guest_pending = keep
        if self.shared is not None:
            return  # the shared hosts' pieces serve every partition's guests: pruned by their owner
        waiting = {p[1].gpu_uuid for p in keep}
        for st in self.vgpu_hosts.values():
            for device, pieces in st.pieces.items():
                if device in waiting:
                    continue
                drop_before(pieces, self.guest_wm.get(device, NEG_INF) - self.node_grace_ms)

    @staticmethod
    def _known(st: NodeState, t: int, end: int) -> bool:
        """Are the segments under ``[t, end)`` final? Past a node whose snapshots stopped (or
        left the inventory) nothing more will come for that time."""
        if end <= st.final_until_ms:
            return True
        return not st.open and not st.pending_segments and t < st.final_until_ms

    # -- utilization ---------------------------------------------------------------
    def _attribute_samples(self, node: str, st: NodeState) -> None:
        """Attribute the node's scrapes whose segments are final (or that waited past the grace);
        the rest wait. Scrapes queue in time order, and a scrape that is neither ready nor past
        the grace, and ends by the next one's time (as a scrape ends where the next begins, or
        sooner), has no later one ready either: every later end is at least its end (final
        only if its is), every later time further from the grace. So the walk stops there."""
        pending = st.pending_scrapes
        if not pending or (len(pending) == 1 and pending[0][3] is None):
            self._prune(st)  # (the node's newest scrape waits for its end)
            return
        keep = []
        grace = None
        first = st.first_snapshot_ms
        for i, scrape in enumerate(pending):
            t, end = scrape[0], scrape[3]
            if end is None:
                keep.append(scrape)
                continue
            if first is not None and t < first and t < st.final_until_ms:
                reason = f"before the first PodResources snapshot of {node}"
            elif first is not None and self._known(st, t, end):
                reason = ""
            else:
                if grace is None:
                    grace = max(self.node_grace_ms, st.snapshot_cadence.stale_after_ms(self.stale_ceiling_ms)
                                if st.snapshot_cadence.intervals_ms else 0)
                if t + grace > self.pr_watermark_ms:
                    if i + 1 == len(pending) or end <= pending[i + 1][0]:
                        keep += pending[i:]
                        break
                    keep.append(scrape)  # (its end past the next one's time: a scrape after a silence)
                    continue
                if st.last_ms is not None and t < st.last_ms:
                    keep.append(scrape)
                    continue
                reason = f"no PodResources snapshot of {node} within {grace // 1000}s grace"
            pos = source_pos(*scrape[2])
            if reason or self.inventory is None or exclusive_facts is None:
                for s in scrape[1]:
                    self._emit_sample(node, st, t, end, s, pos, reason)
                continue
            fallback = partial(self._emit_sample, node, st, t, end, pos=pos, reason="")  # (the sample)
            attributed, unattributed = exclusive_facts(
                self.cluster_id, node, t, end, scrape[1], pos, _gap_reason(st, t), st.pieces,
                self.inventory.by_uuid(), self._util_out, fallback, self.encoded)
            self.counters.samples_attributed += attributed
            self.counters.samples_unattributed += unattributed
        st.pending_scrapes = keep
        self._prune(st)

    def _emit_sample(self, node: str, st: NodeState, t: int, end: int, s: DeviceSample, pos: SourcePos,
                     reason: str) -> None:
        targets = ([(s.gpu_uuid, None, reason)] if reason or self.inventory is None
                   else sample_targets(self.inventory, st.pieces, node, t, s))
        self._emit_targets(node, t, end, s, pos, targets, _gap_reason(st, t), {} if reason else st.pieces)

    def _emit_targets(self, node: str, t: int, end: int, s: DeviceSample, pos: SourcePos, targets, gap_reason: str,
                      pieces: dict[str, list[Piece]]) -> None:
        """One fact per capacity fact the sample's ``[t, end)`` overlaps (span = the overlap);
        one unattributed fact over all of it where none does."""
        per_pod = {(ns, pod): v for ns, pod, v in s.per_pod} if s.per_pod else _NO_PODS
        held = {}
        for _, piece, _ in targets:
            if piece is not None and piece.pod_uid:
                held[piece.pod_uid] = held.get(piece.pod_uid, 0) + 1
        for device, at_t, why in targets:
            parts = [(max(t, p.start_ms), min(end, p.end_ms), p) for p in overlapping(pieces.get(device, ()), t, end)
                     ] if why == "" else []
            if not parts:
                parts = [(t, end, at_t)]
            for i, (a, b, piece) in enumerate(parts):
                fact = utilization_fact(self.cluster_id, node, t, s, pos, device, a, b, piece,
                                        why if why or piece is not None else gap_reason,
                                        per_pod, held, len(targets))
                self._util_out.append(fact)
                if i == 0:  # each sample of each unit counts once, as what covers its start
                    if fact.confidence == "unattributed":
                        self.counters.samples_unattributed += 1
                    else:
                        self.counters.samples_attributed += 1

    def _prune(self, st: NodeState) -> None:
        """Forget pieces no sample can still need: a node's scrapes arrive in order, so pieces
        ending a grace period before the oldest scrape still to come are done with."""
        pending = st.pending_scrapes
        oldest = pending[0][0] if pending else st.dcgm_wm_ms  # (queued in time order)
        horizon = min(oldest, st.dcgm_wm_ms) - self.node_grace_ms
        if horizon > st.pieces_floor_ms:  # some first piece may end before it
            floor = POS_INF
            for pieces in st.pieces.values():
                if pieces and pieces[0].end_ms < horizon:  # most passes drop nothing: no call for them
                    drop_before(pieces, horizon)
                if pieces and pieces[0].end_ms < floor:
                    floor = pieces[0].end_ms
            st.pieces_floor_ms = floor
        if st.gaps:
            st.gaps = [g for g in st.gaps if g[1] >= horizon]
        if st.evidence_gaps:  # a snapshot later than the allowed lateness no longer fills a gap
            st.evidence_gaps = [g for g in st.evidence_gaps if g[1] >= self.pr_watermark_ms - self.lateness_ms]

    def prune_history(self, before_ms: int) -> int:
        """Forget what no record within the late-data horizon can need (a shared attributor:
        pods and namespace versions that ended, vGPU pieces and gaps, before ``before_ms``);
        the facts about it are written. Returns the entries dropped."""
        dropped = self.book.prune(before_ms) if self.shared is None else 0
        for st in self.vgpu_hosts.values():
            for pieces in st.pieces.values():
                drop_before(pieces, before_ms)
            st.gaps = [g for g in st.gaps if g[1] >= before_ms]
            st.evidence_gaps = [g for g in st.evidence_gaps if g[1] >= before_ms]
        return dropped

    def forget_demand_done(self) -> None:
        """Drop the demand already emitted for pods the book no longer holds (nothing to drop
        where no pod left the book since the last time: its keys name pods of the book)."""
        book, last = self.book, self._demand_forgotten_at
        if last is not None and last[0] is book and last[1] == book.pods_dropped:
            return  # (the same book, by identity: a dataclass's == would compare every pod)
        pods = book.pods
        self.demand_done = {key for key in self.demand_done if key.split("/", 1)[0] in pods}
        self._demand_forgotten_at = (book, book.pods_dropped)



_NO_PODS: dict = {}  # a sample without per-pod series (read, never written)


def _gap_reason(st: NodeState, t_ms: int) -> str:
    """Why a sample at ``t_ms`` that no piece covers has no owner, where the node's PodResources
    snapshots left a gap in evidence around it ("" elsewhere)."""
    return "no PodResources evidence (snapshot gap)" if st.gaps and any(a <= t_ms < b for a, b in st.gaps) else ""


try:  # built at install (pyproject.toml): a scrape's samples on exclusive GPUs, those above in C
    from gpuledger.domain import _samples
except ImportError:  # pragma: no cover — tests/unit/domain/test_samples_c.py requires it
    exclusive_facts = None
else:
    _samples.setup(utilization_fact, DeviceSample, Piece, utilization_body)
    exclusive_facts = _samples.exclusive_facts


def drop_before(pieces: list[Piece], horizon_ms: int) -> None:
    """Drop the pieces (sorted by start) that end before the horizon."""
    drop = 0
    while drop < len(pieces) and pieces[drop].end_ms < horizon_ms:
        drop += 1
    del pieces[:drop]
