"""One virtual clock driving every instance of a cluster in event order.

Events, in a heap: a step's end (at the time its cost model predicts), a KV transfer's arrival, and
requests' arrivals (from the sorted stream). All events at one time are applied in a fixed order (step
ends by instance, then transfers by hand-off order, then arrivals by request order), and only then does
every idle instance with work start its next step, in instance order: deterministic and
byte-reproducible. A step is computed when it starts (its tokens carry its end time); what it hands on
(finished requests, first tokens to transfer) happens at its end.

A prefilled sequence's transfer waits, in the queue of the decode instance the router chose at its
hand-off (first come, first served), for blocks there to hold its KV (reserved when it starts: the
decode pool limits the transfers in flight; sequences preempted there are recomputed first), then
shares the link with the transfers in flight on its two ports (links.SharedLinks): a transfer's end
moves when another starts or ends, and the event of its old end is dropped. The prefill instance
holds the sequence's blocks until its transfer ends. An instance whose next step needs blocks that
transfers in flight hold (sent from it, or reserved for KV on its way to it) idles until one ends.

With one instance this is replay() (engine/replay.py) step for step: the same arrivals enter at the
same step boundaries, so the same floats come out.
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import Callable

from chunklab.topology.cluster import Cluster
from chunklab.topology.instance import Instance
from chunklab.topology.links import SharedLinks
from chunklab.topology.phases import Placement
from chunklab.engine.replay import ReplayResult
from chunklab.engine.sequence import Request, Sequence
from chunklab.engine.step_log import StepLog

STEP_END, TRANSFER_END = 0, 1  # order of events at one time; arrivals come after both


@dataclass
class ClusterRun:
    result: ReplayResult  # sequences in request order, every instance's steps (merged), makespan
    placements: dict[int, Placement]  # request_id -> where it went and when it moved


def simulate_cluster(cluster: Cluster, requests: list[Request], on_done: Callable[[int], None] | None = None,
                     should_stop: Callable[[], bool] | None = None) -> ClusterRun:
    """Runs until every request has finished or been rejected, or should_stop() says stop (checked
    between events; a stopped run keeps what it completed and reports the rest unfinished)."""
    return _Simulation(cluster, on_done or (lambda n: None)).run(requests, should_stop)


class _Simulation:
    def __init__(self, cluster: Cluster, on_done: Callable[[int], None]):
        self.cluster, self.on_done = cluster, on_done
        self.events: list[tuple] = []  # (time, kind, tiebreak, payload)
        self.busy = [False] * len(cluster.instances)
        # False once an idle instance was found without work: it gains work only by a request routed to it
        # (_arrive), a transfer landing on it (_transfer_ended) or its own step's end, which set it back to
        # True. Spares asking every idle instance's has_work at every event.
        self.may_have_work = [True] * len(cluster.instances)
        self.sequences: dict[int, Sequence] = {}
        self.placements: dict[int, Placement] = {}
        self._num_transfers = 0
        self.links = SharedLinks(cluster.link) if cluster.link is not None else None
        self.queued: dict[int, deque[tuple[int, Sequence, Instance]]] = {i.index: deque() for i in cluster.decode}
        self.in_flight: dict[int, tuple[Sequence, Instance, Instance]] = {}  # transfer number -> what it moves
        self.versions: dict[int, int] = {}  # transfer number -> its end event's version (older ones are dropped)

    def run(self, requests: list[Request], should_stop) -> ClusterRun:
        pending = deque(sorted(requests, key=lambda r: r.arrival_s))
        for inst in self.cluster.instances:
            inst.engine.clock.start()
        now, stopped, error = 0.0, False, None
        while True:
            if should_stop is not None and should_stop():
                stopped = True
                break
            try:
                self._start_steps(now)
            except Exception as err:  # noqa: BLE001 - kept and re-raised by the caller after saving
                stopped, error = True, err
                break
            if not self.events and not pending:
                break
            now = max(now, min(self.events[0][0] if self.events else float("inf"),
                               pending[0].arrival_s if pending else float("inf")))
            while self.events and self.events[0][0] <= now:
                _, kind, key, payload = heapq.heappop(self.events)
                if kind == STEP_END:
                    self._step_ended(key, payload, now)
                elif self.versions.get(key[0]) == key[1]:  # else: an end the link has since moved
                    self._transfer_ended(key[0], now)
            while pending and pending[0].arrival_s <= now:
                self._arrive(pending.popleft())
        for request in pending:  # never arrived before the stop: still waiting, outside the cluster
            self.sequences[request.request_id] = Sequence(request)
            self.placements[request.request_id] = Placement()
        makespan = max(inst.now() for inst in self.cluster.instances)
        logs = [inst.steps for inst in self.cluster.instances]
        steps = logs[0] if len(logs) == 1 else StepLog.merged(logs)  # one instance: replay()'s steps.csv
        result = ReplayResult([self.sequences[r.request_id] for r in requests], steps, makespan, stopped, error)
        return ClusterRun(result, self.placements)

    def _start_steps(self, now: float) -> None:
        busy, may_have_work = self.busy, self.may_have_work
        for inst in self.cluster.instances:
            if busy[inst.index] or not may_have_work[inst.index]:
                continue
            if not inst.has_work:
                may_have_work[inst.index] = False
                continue
            for admitted in inst.admit_arrived():
                where = self.placements[admitted.request.request_id]
                where.admitted_s = max(now, inst.now())
            finished = inst.step_logged(now)
            if finished is None:  # its blocks are held by transfers in flight: one's end wakes it
                may_have_work[inst.index] = False
                continue
            self.busy[inst.index] = True
            heapq.heappush(self.events, (inst.now(), STEP_END, inst.index, finished))

    def _step_ended(self, index: int, finished: list[Sequence], now: float) -> None:
        self.busy[index] = False
        self.may_have_work[index] = True
        inst = self.cluster.instances[index]
        if finished:
            self.on_done(len(finished))
        if inst.role == "decode":  # blocks freed here: the transfers waiting for them may start
            self._start_transfers(inst, now)
        if inst.role != "prefill":
            return
        for seq in inst.hand_off():
            target = self.cluster.decode[self.cluster.decode_router.choose(self.cluster.decode, seq.request)]
            target.expect(seq)
            where = self.placements[seq.seq_id]
            where.decode_instance = target.name
            self._num_transfers += 1
            self.queued[target.index].append((self._num_transfers, seq, inst))
            self._start_transfers(target, now)

    def _start_transfers(self, target: Instance, now: float) -> None:
        """Starts the transfers queued for target, oldest first, while its blocks hold their KV."""
        queue = self.queued[target.index]
        while queue and target.reserve(queue[0][1]):
            number, seq, source = queue.popleft()
            where = self.placements[seq.seq_id]
            where.transfer_start_s = now
            self.in_flight[number] = (seq, source, target)
            self._reschedule(self.links.start(number, source.index, target.index, seq.num_computed_tokens, now))

    def _reschedule(self, ends: list[tuple[int, float]]) -> None:
        for number, end in ends:
            version = self.versions.get(number, 0) + 1
            self.versions[number] = version
            heapq.heappush(self.events, (end, TRANSFER_END, (number, version), None))

    def _transfer_ended(self, number: int, now: float) -> None:
        seq, source, target = self.in_flight.pop(number)
        del self.versions[number]
        self._reschedule(self.links.finish(number, now))
        source.release_sent(seq)
        self.may_have_work[source.index] = True  # its blocks are back
        target.receive(seq)
        self.may_have_work[target.index] = True
        where = self.placements[seq.request.request_id]
        where.transfer_end_s = now

    def _arrive(self, request: Request) -> None:
        reason = self.cluster.rejection_reason(request)
        if reason:
            seq = Sequence(request)
            seq.reject(reason)
            where = Placement()
        else:
            inst = self.cluster.entry[self.cluster.router.choose(self.cluster.entry, request)]
            seq = inst.add(request)
            self.may_have_work[inst.index] = True
            where = Placement(prefill_instance=inst.name)
        self.sequences[seq.seq_id] = seq
        self.placements[seq.seq_id] = where
        if seq.is_done:
            self.on_done(1)
