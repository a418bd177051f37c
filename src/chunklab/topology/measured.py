"""A measured cluster: one process per instance (topology/worker.py), each pinned to its own core with
one torch thread, and this process as the coordinator: arrivals in real time, the routers, the
hand-off of prefilled sequences to decode instances, and the record of where each request went.

Reused from the simulated cluster: the topology (build_cluster, with stand-in engines here that
only answer rejection_reason and hold the instances' step logs), the routers, Placement and the
cluster summary. New: the clock (CLOCK_MONOTONIC, one axis for every process; 0 is the origin the
coordinator sends with "start") and the transport (topology/transport_shm.py).

The routers read each instance's load from the coordinator's books (RemoteLoad): requests it holds
(topology/ledger.py), and tokens: what its last step reported plus the prompts sent since.

An instance process that dies ends the run within a poll (POLL_S) plus at most STOP_GRACE_S for the
others to stop: its requests are recorded unfinished (lost with it), the others' too, and
InstanceDied says which instance died and how many requests it held. However the run ends (done,
stopped, an instance dead or failed before "ready", an exception here), this process unlinks every
prefill pool's segment: it names them before the instances start. Plain Python: torch lives in the workers.

This process is not pinned: it shares the instances' cores. Its loop blocks (on the outbox, at most
POLL_S or until the next arrival); the CPU it takes while serving is measured (coordinator_cpu_s) for
the run's summary, as the bias it puts on the instances' steps.
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import threading
import time
from collections import deque

from chunklab.topology.ledger import Ledger
from chunklab.topology.phases import Placement
from chunklab.topology.remote import (READY_TIMEOUT_S, STOP_GRACE_S, InstanceDied, RemoteLoad, WorkerSpec,
                                     segment_name, unlink_segment)
from chunklab.topology.simulated import ClusterRun
from chunklab.topology.cluster import Cluster, build_cluster
from chunklab.config import ServingConfig
from chunklab.engine.build import build_engine
from chunklab.engine.clock import MonotonicClock
from chunklab.engine.engine import LLMEngine
from chunklab.engine.replay import ReplayResult
from chunklab.engine.scheduler import SchedulerStats
from chunklab.engine.sequence import Request, Sequence
from chunklab.engine.step_log import StepLog

POLL_S = 0.02  # the coordinator's longest wait between looks at arrivals and instance liveness
START_DELAY_S = 0.05  # the clock's origin is this far after "start" is sent, so every worker has it


class _ForwardPath:
    """The stand-in engines' executor: names the forward path the workers reported (conditions)."""
    forward_path = ""


def available_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


class MeasuredCluster:
    def __init__(self, serving: ServingConfig):
        self.serving, self.specs, self._stats = serving, [], {}
        self.lost: dict[int, str] = {}  # after run: request_id -> the dead instance that held it
        self.coordinator_cpu_s = 0.0  # after run: this process's CPU seconds while serving (every thread)
        self.coordinator_wall_s = 0.0  # after run: the serving's wall seconds (0 when it never started)
        self._executor = _ForwardPath()
        self.cluster: Cluster = build_cluster(serving, self._stand_in)
        cores = available_cores()
        self.specs = [WorkerSpec(i.index, i.role, i.name, cores[i.index], serving.model, *self.specs[i.index],
                                 shm_name=segment_name() if i.role == "prefill" else "")
                      for i in self.cluster.instances]

    def _stand_in(self, engine, scheduler) -> LLMEngine:
        self.specs.append((engine, scheduler))
        return build_engine(self.serving.model, engine, scheduler, executor=self._executor, clock=MonotonicClock())

    @property
    def forward_path(self) -> str:
        return self._executor.forward_path

    def run(self, requests: list[Request], on_done=None, should_stop=None, on_started=None) -> ClusterRun:
        """Runs every request to the end (or until should_stop(), or an instance dies); on_started(
        {instance name: pid}) once every instance is ready. The error (InstanceDied, a worker's) is the
        result's: the caller writes what was measured, then raises it."""
        coordinator = _Coordinator(self, on_done or (lambda n: None), should_stop or (lambda: False))
        try:
            return coordinator.run(requests, on_started)
        finally:
            self._stats, self.lost = coordinator.stats, coordinator.lost
            self.coordinator_cpu_s, self.coordinator_wall_s = coordinator.serve_cpu_s, coordinator.serve_wall_s

    def stats_of(self, index: int) -> SchedulerStats:
        """The instance's scheduler counters as its last step reported them (zeros before any)."""
        return self._stats.get(index, SchedulerStats(0, 0, 0, 0))


class _Coordinator:
    def __init__(self, mc: MeasuredCluster, on_done, should_stop):
        self.mc, self.cluster, self.on_done, self.should_stop = mc, mc.cluster, on_done, should_stop
        from chunklab.topology.worker import worker_main  # optional: torch, imported by the instances' processes

        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked OpenMP/torch state
        self.outbox = ctx.Queue()
        self.inboxes = [ctx.Queue() for _ in mc.specs]
        self.procs = [ctx.Process(target=worker_main, args=(s, self.inboxes[s.index], self.outbox),
                                  name=f"chunklab-{s.name}", daemon=True) for s in mc.specs]
        self.segments = [s.shm_name for s in mc.specs if s.shm_name]  # unlinked at the end, whatever happens
        self.stats = {}  # instance index -> its last SchedulerStats
        self.sequences: dict[int, Sequence] = {}
        self.placements: dict[int, Placement] = {}
        self.error: Exception | None = None
        self.last_end_s = 0.0
        self.lost: dict[int, str] = {}
        self.serve_cpu_s = self.serve_wall_s = 0.0

    def run(self, requests: list[Request], on_started) -> ClusterRun:
        self.ledger = Ledger(r.request_id for r in requests)
        self.loads = [RemoteLoad(i.name, self.ledger) for i in self.cluster.instances]
        for r in requests:
            self.sequences[r.request_id], self.placements[r.request_id] = Sequence(r), Placement()
        stopped = False
        try:
            self._start()
            handles = self._wait_ready()
            stopped = self.should_stop()
            if self.error is None and not stopped:
                if on_started:
                    on_started({s.name: p.pid for s, p in zip(self.mc.specs, self.procs)})
                stopped = self._serve(requests, handles)
        finally:
            self._shut_down()
        logs = [inst.steps for inst in self.cluster.instances]
        result = ReplayResult([self.sequences[r.request_id] for r in requests], StepLog.merged(logs),
                              self.last_end_s, stopped or self.error is not None, self.error)
        return ClusterRun(result, self.placements)

    # -- start and stop -------------------------------------------------------------------------
    def _start(self) -> None:
        """Starts the instances with SIGINT ignored, which they keep through exec: a terminal's Ctrl-C
        reaches every process of the group, and only this one decides how the run stops."""
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            for p in self.procs:
                p.start()
        finally:
            if main:
                signal.signal(signal.SIGINT, previous)

    def _wait_ready(self) -> dict:
        handles, deadline = {}, time.monotonic() + READY_TIMEOUT_S
        ready = set()
        while len(ready) < len(self.procs) and self.error is None and not self.should_stop():
            try:
                msg = self.outbox.get(timeout=POLL_S * 10)
            except queue.Empty:
                if time.monotonic() > deadline:
                    self.error = InstanceDied(f"instances not ready after {READY_TIMEOUT_S:.0f} s")
                self._check_alive()
                continue
            if msg[0] == "error":
                self._worker_error(msg)
                continue
            _, index, handle, forward_path = msg
            ready.add(index)
            self.mc._executor.forward_path = forward_path
            if handle is not None:
                handles[index] = handle
        return handles

    def _shut_down(self) -> None:
        try:
            for box in self.inboxes:
                box.put(("stop",))
            deadline = time.monotonic() + STOP_GRACE_S
            while any(p.is_alive() for p in self.procs) and time.monotonic() < deadline:
                try:  # a worker exits only once its messages are read: they are dropped now
                    self.outbox.get(timeout=POLL_S)
                except queue.Empty:
                    pass
            for p in self.procs:
                if p.is_alive():
                    p.kill()
                if p.pid is not None:
                    p.join(1.0)
            for box in self.inboxes:  # what a dead instance never read must not hold this process's exit
                box.cancel_join_thread()
        finally:  # the prefill pools: named here, so unlinked here, whoever died and whenever
            for name in self.segments:
                unlink_segment(name)

    # -- the run --------------------------------------------------------------------------------
    def _serve(self, requests: list[Request], handles: dict) -> bool:
        """Runs the requests; serve_cpu_s and serve_wall_s: this process's CPU and wall seconds doing it."""
        cpu_s, wall_s = time.process_time(), time.monotonic()
        try:
            return self._serve_loop(requests, handles)
        finally:
            self.serve_cpu_s, self.serve_wall_s = time.process_time() - cpu_s, time.monotonic() - wall_s

    def _serve_loop(self, requests: list[Request], handles: dict) -> bool:
        origin_s = time.monotonic() + START_DELAY_S
        self.clock = MonotonicClock(origin_s)
        for box in self.inboxes:
            box.put(("start", origin_s, handles))
        pending = deque(sorted(requests, key=lambda r: r.arrival_s))
        while self.ledger.num_open and self.error is None:
            if self.should_stop():
                return True
            now = self.clock.now()
            while pending and pending[0].arrival_s <= now:
                self._arrive(pending.popleft())
            wait = POLL_S if not pending else min(POLL_S, max(0.0, pending[0].arrival_s - now))
            try:
                self._handle(self.outbox.get(timeout=wait) if wait > 0 else self.outbox.get_nowait())
                while True:
                    self._handle(self.outbox.get_nowait())
            except queue.Empty:
                pass
            self._check_alive()
        return False

    def _arrive(self, request: Request) -> None:
        rid, seq = request.request_id, self.sequences[request.request_id]
        reason = self.cluster.rejection_reason(request)
        if reason:
            seq.reject(reason)
            self.ledger.reject(rid)
            self.on_done(1)
            return
        entry = self.cluster.entry
        pos = self.cluster.router.choose([self.loads[i.index] for i in entry], request)
        inst = entry[pos]
        inst.num_routed += 1
        self.loads[inst.index].tokens_since += len(request.prompt_token_ids)
        self.ledger.assign(rid, inst.name)
        self.placements[rid].prefill_instance = inst.name
        self.inboxes[inst.index].put(("request", request))

    def _handle(self, msg: tuple) -> None:
        kind, index = msg[0], msg[1]
        if kind == "error":
            self._worker_error(msg)
        elif kind == "step":
            self._steps_ended(index, *msg[2:])
        elif kind == "received":
            _, _, rid, end_s, source = msg
            self.placements[rid].transfer_end_s = end_s
            self.inboxes[source].put(("release", rid))

    def _steps_ended(self, index, records, finished, handed, admitted, stats, tokens) -> None:
        inst = self.cluster.instances[index]
        for record in records:
            inst.steps.append(record)
            self.last_end_s = max(self.last_end_s, record.start_s + record.duration_s)
        self.stats[index] = stats
        load = self.loads[index]
        load.reported_tokens, load.tokens_since = tokens, 0
        for seq in finished:
            self.sequences[seq.seq_id] = seq
            self.ledger.finish(seq.seq_id, inst.name)
        for rid, t, write_s in admitted:
            self.placements[rid].admitted_s, self.placements[rid].kv_write_s = t, write_s
        for seq, block_ids in handed:
            self._hand_off(inst, seq, block_ids)
        if finished:
            self.on_done(len(finished))

    def _hand_off(self, source, seq: Sequence, block_ids: list[int]) -> None:
        rid = seq.seq_id
        self.sequences[rid] = seq  # prefilled: its first token, where it stands if nothing more comes
        pos = self.cluster.decode_router.choose([self.loads[i.index] for i in self.cluster.decode], seq.request)
        target = self.cluster.decode[pos]
        target.num_routed += 1
        self.ledger.move(rid, source.name, target.name)
        where = self.placements[rid]
        where.decode_instance, where.transfer_start_s = target.name, seq.token_times_s[0]
        self.inboxes[target.index].put(("kv", seq, source.index, block_ids))

    # -- failures -------------------------------------------------------------------------------
    def _check_alive(self) -> None:
        if self.should_stop():  # stopping: a signal to the whole group may end the instances first
            return
        for spec, p in zip(self.mc.specs, self.procs):
            if self.error is None and p.exitcode is not None:
                self._died(spec.name, f"(pid {p.pid}) died with exit code {p.exitcode}")

    def _worker_error(self, msg: tuple) -> None:
        spec = self.mc.specs[msg[1]]
        self._died(spec.name, f"failed: {msg[2]}")

    def _died(self, name: str, how: str) -> None:
        held = self.ledger.lose(name) if hasattr(self, "ledger") else []
        self.lost |= dict.fromkeys(held, name)
        open_ = self.ledger.num_open
        self.error = InstanceDied(f"instance {name} {how}, holding {len(held)} requests; the run stopped with "
                                  f"{open_ + len(held)} requests unfinished (recorded as such)")
