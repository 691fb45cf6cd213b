"""The as-of join: PodResources snapshots + watch ownership + inventory -> capacity facts;
DCGM samples -> utilization facts attributed to the capacity facts covering what they stand for.

Snapshots become segments (``domain/segments.py``): each stands for the time until the next
snapshot of its node, within the staleness limit of the node's observed cadence
(``domain/cadence.py``); past it is a gap in evidence, never anybody's allocation. A segment
is final once the watch stream's watermark has passed its end (so pod and namespace versions
inside it are known) and a snapshot past its capacity window came: the segments starting in
one window go out together, a unit's unchanged ones as one capacity fact.

A DCGM scrape likewise stands for ``[t, end)``: until the node's next scrape, one cadence
when the next came too late or never. A sample waits until its end is known and the segments
under it are final, then becomes one utilization fact per capacity fact it overlaps (span =
the overlap), so covered time never depends on how scrapes and snapshots interleave. A node
silent for longer than the grace (``node_grace_ms``, or its own snapshot staleness limit when
longer) behind the PodResources watermark leaves its samples unattributed with that reason.

All times are epoch ms; all intervals half-open. The caller feeds records and watermarks;
nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuledger.domain.capacity import CAPACITY_WINDOW_MS, merge_runs, run_facts, same_pods, segment_facts
from gpuledger.domain.dcgm import parse_exposition, row_of, sample_of
from gpuledger.domain.demand import closed_demand
from gpuledger.domain.facts import CapacityFact, FactBatch, SourcePos, UtilizationFact
from gpuledger.domain.gpu_incidents import HealthFold
from gpuledger.domain.inventory import Inventory, parse_inventory
from gpuledger.domain.k8s import OwnershipBook
from gpuledger.domain.model_metrics import model_facts
from gpuledger.domain.podresources import snapshot_holders
from gpuledger.domain.requests import RequestFact, request_fact
from gpuledger.domain.samples import SampleAttribution
from gpuledger.domain.segments import NEG_INF, NodeState, node_from, node_state, state_of
from gpuledger.domain.vgpu import vgpu_holders, vgpu_segment_facts

__all__ = ["NEG_INF", "Attributor", "Counters"]


@dataclass
class Counters:
    watch_events: int = 0
    snapshots: int = 0
    stale_snapshots: int = 0
    repeated_scrapes: int = 0
    scrapes_after_inventory: int = 0
    scrapes: int = 0
    samples: int = 0
    samples_attributed: int = 0
    samples_unattributed: int = 0
    capacity_facts: int = 0


class Attributor(SampleAttribution):
    """Folds source records into ownership and emits deterministic facts."""

    def __init__(self, cluster_id: str, stale_ceiling_ms: int, node_grace_ms: int,
                 shared: Attributor | None = None, emit_demand: bool = True, lateness_ms: int = 3_600_000) -> None:
        """``shared``: the cluster's broadcast attributor (the watch, the inventory, every vGPU
        host); this one then folds only its own partition's nodes and hosts, and attributes
        guest samples against the shared hosts. ``emit_demand``: this one turns the book's
        pending MIG pods into demand facts (one attributor per cluster does)."""
        self.cluster_id = cluster_id
        self.stale_ceiling_ms = stale_ceiling_ms
        self.node_grace_ms = node_grace_ms
        self.lateness_ms = lateness_ms
        self.shared = shared
        self.emit_demand = emit_demand
        self._book = OwnershipBook()
        self._inventory: Inventory | None = None
        self.inventory_doc: dict | None = None
        self.nodes: dict[str, NodeState] = {}
        self.vgpu_hosts: dict[str, NodeState] = {}
        self.vgpu_index: dict[str, str] = {}  # vgpu uuid -> host
        self.guest_pending: list = []  # [t, row, pos, node, end or None] of samples taken inside vGPU guests
        self.guest_wm: dict[str, int] = {}  # vgpu uuid -> latest guest sample time
        self.guest_open: dict[str, list] = {}  # node -> its latest scrape's guest entries (their end unknown)
        self.k8s_watermark_ms = NEG_INF
        self.pr_watermark_ms = NEG_INF
        self.vgpu_watermark_ms = NEG_INF
        self.dcgm_watermark_ms = NEG_INF
        self.counters = Counters()
        self._capacity_out: list[CapacityFact] = []
        self._util_out: list[UtilizationFact] = []
        self._request_out: list[RequestFact] = []
        self._demand_out: list = []
        self._health_out: list = []  # health facts and incidents: at once, per scrape (no attribution)
        self._incident_out: list = []
        self.health = HealthFold()  # each device's last health values (incidents are changes)
        self._model_out: list = []
        self.model_series: dict[str, list] = {}  # model server series -> [last scrape ms, its counters]
        self.demand_done: set[str] = set()  # pods whose MIG wait is already a fact
        self._demand_forgotten_at: tuple | None = None  # (book, its pods_dropped) at the last forget_demand_done
        self._demand_asked: tuple | None = None  # (book version, watch watermark) closed_demand last ran with

    @property
    def book(self) -> OwnershipBook:
        return self.shared._book if self.shared is not None else self._book

    @property
    def inventory(self) -> Inventory | None:
        return self.shared._inventory if self.shared is not None else self._inventory

    @property
    def guest_source(self) -> Attributor:
        """Where guest samples find their vGPU hosts: the shared attributor, or this one."""
        return self.shared if self.shared is not None else self

    # -- inputs ------------------------------------------------------------------
    def apply_inventory(self, doc: dict) -> None:
        self._inventory = parse_inventory(doc)
        self.inventory_doc = doc

    def apply_watch(self, event_type: str, obj: dict, observed_at_ms: int) -> str:
        self.counters.watch_events += 1
        return self.book.apply(event_type, obj, observed_at_ms)

    def apply_podresources(self, node: str, response: dict, observed_at_ms: int, pos: SourcePos) -> None:
        self.apply_holders(node, snapshot_holders(response), observed_at_ms, pos)

    def apply_holders(self, node: str, holders: dict, observed_at_ms: int, pos: SourcePos) -> None:
        """A PodResources snapshot as ``snapshot_holders`` reads it (a reader may hand the same
        dict for the same response again: it is never changed once made)."""
        self._snapshot(node, state_of(self.nodes, node), holders, observed_at_ms, pos,
                       lambda: self._node_facts(node))

    def apply_vgpu(self, host: str, vgpus: list[dict], observed_at_ms: int, pos: SourcePos) -> None:
        holders = vgpu_holders(vgpus)
        if self._snapshot(host, state_of(self.vgpu_hosts, host), holders, observed_at_ms, pos,
                          lambda: self._vgpu_facts(host)):
            self.vgpu_index.update(dict.fromkeys(holders, host))

    def _node_end_ms(self, node: str) -> int | None:
        return self.inventory.node_end_ms(node) if self.inventory is not None else None

    def _snapshot(self, node: str, st: NodeState, holders: dict, observed_at_ms: int, pos: SourcePos,
                  facts_of) -> bool:
        """A full snapshot closes what the previous one stands for. One older than the
        latest is late: it splits the segment or gap in evidence it falls in (new facts for
        time that had none, never an edit of facts already written); otherwise it is counted
        stale, as is one after its node left the inventory."""
        if (st.last_ms is not None and observed_at_ms <= st.last_ms) or observed_at_ms < st.closed_until_ms:
            if not self._fill_gap(st, holders, observed_at_ms, pos, facts_of):
                self.counters.stale_snapshots += 1
            return False
        self.counters.snapshots += 1
        st.take_snapshot(holders, observed_at_ms, (pos.topic, pos.partition, pos.offset), self.stale_ceiling_ms,
                         self._node_end_ms(node))
        return True

    def apply_dcgm(self, node: str, exposition: str, observed_at_ms: int, pos: SourcePos) -> dict[str, int]:
        """Parse a scrape and queue its samples; returns series skipped, by reason. A node's
        scrapes arrive in order, so one not newer than the last applied is a redelivery
        (at-least-once upstream) and is dropped, counted. The scrape ends what the previous
        one stands for."""
        # first: a malformed scrape is refused even when repeated
        parsed = parse_exposition(exposition, (self.cluster_id, node))
        st = state_of(self.nodes, node)
        if observed_at_ms <= st.dcgm_wm_ms:
            self.counters.repeated_scrapes += 1
            return {}
        if observed_at_ms < st.dcgm_closed_until_ms:
            self.counters.scrapes_after_inventory += 1
            return {}
        ended = st.scrape_end(observed_at_ms, self.stale_ceiling_ms)
        if ended is not None:
            self._end_scrape(node, st, *ended)
        facts, incidents = self.health.scrape(self.cluster_id, node, observed_at_ms, parsed, pos, self.encoded)
        self._health_out += facts
        self._incident_out += incidents
        samples = []
        at = [pos.topic, pos.partition, pos.offset]
        vgpu_index = self.guest_source.vgpu_index
        for s in parsed.samples:
            if s.model.startswith("GRID ") or s.gpu_uuid in vgpu_index:
                entry = [observed_at_ms, s, at, node, None]
                self.guest_pending.append(entry)
                self.guest_open.setdefault(node, []).append(entry)
                self.guest_wm[s.gpu_uuid] = max(self.guest_wm.get(s.gpu_uuid, NEG_INF), observed_at_ms)
                self.counters.samples += 1
            else:
                samples.append(s)
        if samples or not parsed.samples:  # a scrape inside a vGPU guest has nothing for the node itself
            st.pending_scrapes.append([observed_at_ms, samples, at, None])
        st.dcgm_wm_ms, st.dcgm_open = max(st.dcgm_wm_ms, observed_at_ms), True
        self.counters.scrapes += 1
        self.counters.samples += len(samples)
        node_end = self._node_end_ms(node)
        median = None if node_end is None else st.scrape_cadence.median_ms()  # (asked only where it is used)
        if node_end is not None and median is not None and observed_at_ms < node_end <= observed_at_ms + median:
            # the node's last scrape before it leaves the inventory: one cadence, never past its end
            self._end_scrape(node, st, observed_at_ms, min(observed_at_ms + median, node_end))
            st.dcgm_open, st.dcgm_closed_until_ms = False, observed_at_ms + median
        return parsed.skipped

    def _end_scrape(self, node: str, st: NodeState, t_ms: int, end_ms: int) -> None:
        st.set_scrape_end(t_ms, end_ms)
        for guest in self.guest_open.pop(node, ()):
            if guest[0] == t_ms:
                guest[4] = end_ms

    def advance(self, k8s_watermark_ms: int, podresources_watermark_ms: int, vgpu_watermark_ms: int = NEG_INF,
                dcgm_watermark_ms: int = NEG_INF, closing: bool = False) -> None:
        """Move the watermarks forward (never back) and emit whatever became final. Guest
        samples wait for the shared attributor's vGPU watermark when there is one. ``closing``:
        the input ends here (a bounded run caught up), so the windows of queued segments still
        open are emitted as they stand."""
        self.k8s_watermark_ms = max(self.k8s_watermark_ms, k8s_watermark_ms)
        self.pr_watermark_ms = max(self.pr_watermark_ms, podresources_watermark_ms)
        self.dcgm_watermark_ms = max(self.dcgm_watermark_ms, dcgm_watermark_ms)
        for node in sorted(self.nodes):
            st = self.nodes[node]
            ended = st.scrape_silent_end(self.dcgm_watermark_ms, self.stale_ceiling_ms)
            if ended is not None:
                self._end_scrape(node, st, *ended)
            st.stop_if_silent(self.pr_watermark_ms, self.stale_ceiling_ms)
            self._finalize_segments(node, st, closing)
            self._attribute_samples(node, st)
        self.advance_vgpu(vgpu_watermark_ms, closing)
        self._attribute_guest_samples()
        if self.emit_demand:  # asked again only of another book or watermark: the same ones answer nothing new
            asked = (self.book.version, self.k8s_watermark_ms)
            if asked != self._demand_asked:
                self._demand_out += closed_demand(self.book, self.cluster_id, self.k8s_watermark_ms, self.demand_done)
                self._demand_asked = asked

    def advance_vgpu(self, vgpu_watermark_ms: int, closing: bool = False) -> None:
        """Close and emit what this attributor's vGPU hosts' snapshots made final."""
        self.vgpu_watermark_ms = max(self.vgpu_watermark_ms, vgpu_watermark_ms)
        if self.inventory is not None:
            for host in sorted(self.vgpu_hosts):
                st = self.vgpu_hosts[host]
                st.stop_if_silent(self.vgpu_watermark_ms, self.stale_ceiling_ms)
                self._finalize_vgpu(host, st, closing)
                if self.shared is not None:
                    st.pieces.clear()  # guests are attributed against the shared hosts' pieces

    def apply_request(self, record: dict, pos: SourcePos) -> None:
        """A finished request is a fact at once: it names its tenant itself."""
        self._request_out.append(request_fact(record, pos))

    def apply_model_scrape(self, record: dict, pos: SourcePos) -> dict[str, int]:
        """A model server's scrape is a fact at once per model and revision (its counters'
        increases since the series' previous scrape); returns the series skipped, by reason."""
        facts, skipped = model_facts(self.model_series, record, pos, self.stale_ceiling_ms)
        self._model_out += facts
        return skipped

    def drain(self) -> FactBatch:
        out = FactBatch(self._capacity_out, self._util_out, self._request_out, self._demand_out, self._model_out)
        self._capacity_out, self._util_out, self._request_out, self._demand_out = [], [], [], []
        self._model_out = []
        out.health, out.health_incidents = self._health_out, self._incident_out
        self._health_out, self._incident_out = [], []
        return out

    def pending_samples(self) -> int:
        return sum(len(r[1]) for st in self.nodes.values() for r in st.pending_scrapes) + len(self.guest_pending)

    # -- capacity ------------------------------------------------------------------
    def _node_facts(self, node: str):
        inv, book, cluster = self.inventory, self.book, self.cluster_id
        return lambda a, b, h, pos: segment_facts(inv, book, cluster, node, a, b, h, pos)

    def _vgpu_facts(self, host: str):
        inv, cluster = self.inventory, self.cluster_id
        return lambda a, b, h, pos: vgpu_segment_facts(inv, cluster, host, a, b, h, pos)

    def _finalize_segments(self, node: str, st: NodeState, closing: bool) -> None:
        if self.inventory is None or _first_window_open(st, closing):  # (most passes: no closure made for it)
            return
        self._finalize(st, self.k8s_watermark_ms, self._node_facts(node), closing, self._same_pods)

    def _same_pods(self, holders: dict, a_ms: int, b_ms: int) -> bool:
        """Every holder names the same pod at ``a_ms`` and at ``b_ms`` (a node segment's facts
        look its holders' pods up at the segment's start)."""
        return same_pods(self.book, holders, a_ms, b_ms)

    def _finalize_vgpu(self, host: str, st: NodeState, closing: bool) -> None:
        # a vGPU snapshot names its owners itself: no watch to wait for
        self._finalize(st, None, self._vgpu_facts(host), closing)

    def _finalize(self, st: NodeState, until_ms: int | None, facts_of, closing: bool = False,
                  same_pods=None) -> None:
        """Emit the queued segments and gaps a window at a time: those starting in one aligned
        window (``CAPACITY_WINDOW_MS``) once a snapshot past the window came (or the node's
        snapshots stopped, so nothing more comes) and ``until_ms`` has passed their end (None:
        at once). A unit's facts that run on unchanged across them merge (``merge_runs``).
        ``same_pods(holders, a, b)``: consecutive segments with equal holders that name the
        same pods at both starts are one segment to ``facts_of`` (the facts ``merge_runs``
        would make of them, built once instead of once per snapshot)."""
        pending = st.pending_segments
        while pending:
            if _first_window_open(st, closing):
                return
            edge = (pending[0][0] // CAPACITY_WINDOW_MS + 1) * CAPACITY_WINDOW_MS
            n = next((i for i, e in enumerate(pending) if e[0] >= edge), len(pending))
            if until_ms is not None and pending[n - 1][1] > until_ms:
                if not closing:
                    return
                n = next((i for i, e in enumerate(pending[:n]) if e[1] > until_ms), n)  # what is final goes out
                if n == 0:
                    return
            batch, st.pending_segments = pending[:n], pending[n:]
            pending = st.pending_segments
            items = []
            run = None  # [start, end, holders, [(start, pos) of each segment]] of the segments taken as one
            for start, end, holders, pos, gap in batch:
                if run is not None and not gap and same_pods is not None and run[1] == start \
                        and run[2] == holders and same_pods(holders, run[0], start):
                    run[1] = end
                    run[3].append((start, pos))
                    continue
                if run is not None:
                    items += run_facts(facts_of, *run)
                    run = None
                if gap:
                    st.gaps.append([start, end])
                    st.evidence_gaps.append([start, end, holders, list(pos)])
                else:
                    run = [start, end, holders, [(start, pos)]]
            if run is not None:
                items += run_facts(facts_of, *run)
            self._emit_capacity(st, merge_runs(items))
            st.final_until_ms = max(st.final_until_ms, batch[-1][1])

    def _segment(self, st: NodeState, start: int, end: int, holders: dict, pos, gap: bool, facts_of) -> None:
        if gap:
            st.gaps.append([start, end])
            st.evidence_gaps.append([start, end, holders, list(pos)])
            return
        self._emit_capacity(st, facts_of(start, end, holders, SourcePos(*pos)))

    def _emit_capacity(self, st: NodeState, items) -> None:
        for device, fact, piece in items:
            self._capacity_out.append(fact)
            self.counters.capacity_facts += 1
            pieces = st.pieces.setdefault(device, [])
            pieces.append(piece)
            if piece.end_ms < st.pieces_floor_ms:
                st.pieces_floor_ms = piece.end_ms
            if len(pieces) > 1 and pieces[-2].start_ms > piece.start_ms:  # a filled gap lands in the past
                pieces.sort(key=lambda p: p.start_ms)

    def _fill_gap(self, st: NodeState, holders: dict, t: int, pos: SourcePos, facts_of) -> bool:
        """Split the queued segment or the evidence gap a late snapshot falls in."""
        at = [pos.topic, pos.partition, pos.offset]
        if st.split_pending(t, holders, at, self.stale_ceiling_ms):
            self.counters.snapshots += 1
            return True
        for gap in st.evidence_gaps:
            if gap[0] <= t < gap[1] and self.inventory is not None:
                st.evidence_gaps.remove(gap)
                st.gaps = [g for g in st.gaps if g != [gap[0], gap[1]]]
                emit = facts_of()
                for a, b, h, p, is_gap in (st.bridge(gap[0], t, gap[2], gap[3], True, self.stale_ceiling_ms)
                                           + st.bridge(t, gap[1], holders, at, False, self.stale_ceiling_ms)):
                    self._segment(st, a, b, h, p, is_gap, emit)
                self.counters.snapshots += 1
                return True
        return False

    # -- checkpoint state ------------------------------------------------------------
    def to_state(self) -> dict:
        """Everything this attributor owns (not the shared attributor's book and hosts)."""
        own = self.shared is None
        return {
            "cluster_id": self.cluster_id, "book": self._book.to_state() if own else None,
            "inventory": self.inventory_doc if own else None,
            "k8s_wm": self.k8s_watermark_ms, "pr_wm": self.pr_watermark_ms, "vgpu_wm": self.vgpu_watermark_ms,
            "dcgm_wm": self.dcgm_watermark_ms, "counters": vars(self.counters),
            "vgpu_index": self.vgpu_index, "guest_wm": self.guest_wm,
            "guest_pending": [[t, row_of(s), *rest] for t, s, *rest in self.guest_pending],
            "health": self.health.state,
            "demand_done": sorted(self.demand_done), "model_series": self.model_series,
            "nodes": {n: node_state(s) for n, s in self.nodes.items()},
            "vgpu_hosts": {h: node_state(s) for h, s in self.vgpu_hosts.items()},
        }

    @classmethod
    def from_state(cls, state: dict, stale_ceiling_ms: int, node_grace_ms: int, shared: Attributor | None = None,
                   emit_demand: bool = True, lateness_ms: int = 3_600_000) -> Attributor:
        att = cls(state["cluster_id"], stale_ceiling_ms, node_grace_ms, shared, emit_demand, lateness_ms)
        if state.get("book") is not None:
            att._book = OwnershipBook.from_state(state["book"])
        if state.get("inventory") is not None:
            att.apply_inventory(state["inventory"])
        att.k8s_watermark_ms, att.pr_watermark_ms = state["k8s_wm"], state["pr_wm"]
        att.vgpu_watermark_ms = state.get("vgpu_wm", NEG_INF)
        att.dcgm_watermark_ms = state.get("dcgm_wm", NEG_INF)
        att.counters = Counters(**state["counters"])
        att.vgpu_index = dict(state.get("vgpu_index", {}))
        att.guest_pending = [[t, sample_of(row), *[*rest, None][:3]]
                             for t, row, *rest in state.get("guest_pending", [])]
        for g in att.guest_pending:
            if g[4] is None:
                att.guest_open.setdefault(g[3], []).append(g)
        att.guest_wm = dict(state.get("guest_wm", {}))
        att.health = HealthFold(state=state.get("health"))
        att.demand_done = set(state.get("demand_done", []))
        att.model_series = {k: [t, dict(c)] for k, (t, c) in state.get("model_series", {}).items()}
        att.nodes = {n: node_from(s) for n, s in state["nodes"].items()}
        att.vgpu_hosts = {h: node_from(s) for h, s in state.get("vgpu_hosts", {}).items()}
        return att


def _first_window_open(st: NodeState, closing: bool) -> bool:
    """Nothing queued, or a segment starting in the first queued one's capacity window may still
    be queued (a bounded run's ``closing`` takes the windows as they stand)."""
    pending = st.pending_segments
    if not pending:
        return True
    edge = (pending[0][0] // CAPACITY_WINDOW_MS + 1) * CAPACITY_WINDOW_MS
    return st.open and st.last_ms < edge and not closing
