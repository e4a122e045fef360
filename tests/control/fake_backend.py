"""A backend in memory, for testing the control plane without processes or files.

`FakeBackend` is what the reconcilers get: the ten members of `Backend` and nothing
else (no optional capability), over a `FakeInstances`, which is what a test scripts
and inspects. Instances are records keyed by (job key, host) that say what the test
makes them say (`report`, `finish`, `kill`, `obey_stops`), and every call the control
plane makes is recorded (`launched`, `assigned`, `stops`, `releases`, `purges`).

It holds the control plane to what the local backend (`compute/backends/local.py`)
does, so a test cannot pass on behaviour a real backend would not give:

- `launch` starts one instance per spec, once per (job key, host, attempt): a second
  launch of the same attempt is a no-op answering the same handles; a later attempt
  gets a fresh instance in the same place (a plan job resumed).
- `assign` hands a job to the running instances launched for a warm pool's home key;
  a home that does not exist raises (the local backend's `FileNotFoundError`); a home
  whose agent died takes the job but never runs it (the job's agent is that dead one).
- An instance's agent outlives its job only when the job asked for a keep-alive (it
  waits for the next job or its release), as the agent does; `release` tells a live
  agent to go (answering False, as it is still running when told) and answers True
  once none runs.
- Specs must be `JobSpec` values (a real backend serialises them at its file boundary).

What the control plane must never do - hand a job to an instance that is running
another, launch a spec whose host is not one of its hosts - is recorded in `misuse`
(and raised, where a real backend would fail); tests assert it stays empty.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from dockyard.clock import Clock
from dockyard.compute.backends.protocol import InstanceLog, InstanceRecords
from dockyard.compute.wire.log_format import Event, encode_term
from dockyard.compute.wire.spec import JobSpec
from dockyard.compute.wire.state import LAUNCHING, InstanceState, Phase
from dockyard.domain.metrics import Latest

ENDED: frozenset[str] = frozenset({"completed", "failed", "stopped"})


class Misuse(RuntimeError):
    """A call a real backend would refuse, or that would break a real instance."""


@dataclass
class Agent:
    """One instance: the agent launched for (home key, host), which may run later jobs
    of a warm pool too."""

    home: str
    host: str
    attempt: int
    alive: bool = True
    released: bool = False
    # The handle of the run it is doing (or did last).
    current: str = ""


@dataclass
class Run:
    """One job on one instance: what its state says, and what it was told."""

    job_key: str
    host: str
    spec: JobSpec
    agent: Agent
    state: InstanceState = field(default_factory=lambda: InstanceState(**LAUNCHING))
    stop_requested: bool = False

    @property
    def ended(self) -> bool:
        return self.state.get("phase") in ENDED


class MemoryLog:
    """An instance's log as `InstanceLog` reads it: a snapshot of its events."""

    def __init__(self, events: Sequence[Event]) -> None:
        self._events = list(events)

    def __len__(self) -> int:
        return len(self._events)

    def _size(self, position: int) -> int:
        return len(encode_term(self._events[position].message)) + 20

    def timestamp(self, position: int) -> int:
        return self._events[position].timestamp

    def first_at(self, timestamp_ms: int) -> int:
        for position, event in enumerate(self._events):
            if event.timestamp >= timestamp_ms:
                return position
        return len(self._events)

    def fit(self, start: int, stop: int, budget: int, *, from_end: bool = False) -> int:
        if start >= stop:
            return start if from_end else stop
        used = 0
        if from_end:
            position = stop
            while position > start:
                used += self._size(position - 1)
                if used > budget and position < stop:
                    break
                position -= 1
            return min(position, stop - 1)
        position = start
        while position < stop:
            used += self._size(position)
            if used > budget and position > start:
                break
            position += 1
        return position

    def read(self, start: int, stop: int) -> list[Event]:
        return self._events[start:stop]

    def search(
        self, start: int, stop: int, terms: Sequence[str] = ()
    ) -> Iterator[tuple[int, int, int, str | None]]:
        for position in range(start, min(stop, len(self._events))):
            event = self._events[position]
            found = all(term in event.message for term in terms)
            yield (
                event.timestamp,
                position,
                self._size(position),
                (event.message if found else None),
            )

    def close(self) -> None:
        pass

    def __enter__(self) -> InstanceLog:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class FakeRecords:
    """What the fake's instances reported, read as `InstanceRecords`."""

    def __init__(self, instances: FakeInstances) -> None:
        self._backend = instances

    def logged_hosts(self, job_key: str) -> list[str]:
        hosts = [host for key, host in self._backend._logs if key == job_key]
        return sorted(hosts, key=lambda name: int(name.removeprefix("algo-") or 0))

    def logged_instances(self, key_prefix: str) -> list[tuple[str, str]]:
        return sorted(key for key in self._backend._logs if key[0].startswith(key_prefix))

    def open_log(self, job_key: str, host: str) -> InstanceLog:
        return MemoryLog(self._backend._logs.get((job_key, host), []))

    def metrics(self, job_key: str, host: str) -> Latest:
        return dict(self._backend._metrics.get((job_key, host), {}))

    def launched_spec(self, job_key: str, host: str) -> JobSpec | None:
        run = self._backend._runs.get(self._backend.handle(job_key, host))
        return run.spec if run is not None else None


class FakeInstances:
    """The instances in memory: what tests script and inspect (see the module); the
    control plane sees them through `backend`."""

    def __init__(self, clock: Clock) -> None:
        # The agents' clock: the times instances report. Tests give it the control
        # plane's manual clock, so run times are what the test moved it by.
        self._clock = clock
        self._agents: dict[tuple[str, str], Agent] = {}
        self._runs: dict[str, Run] = {}
        self._logs: dict[tuple[str, str], list[Event]] = {}
        self._metrics: dict[tuple[str, str], Latest] = {}
        self._wakes: set[str] = set()
        self._records = FakeRecords(self)
        self.backend = FakeBackend(self)
        self._failures: dict[str, list[BaseException]] = {}
        # Every call, for assertions: (job key, spec) of each instance started, (home,
        # job key, host) of each job handed a pool, handles told to stop, ...
        self.launched: list[tuple[str, JobSpec]] = []
        self.assigned: list[tuple[str, str, str]] = []
        self.stops: list[str] = []
        self.releases: list[tuple[str, tuple[str, ...]]] = []
        self.purges: list[str] = []
        self.misuse: list[str] = []

    # ------------------------------------------------------------------ the calls

    def launch(self, job_key: str, specs: Sequence[JobSpec]) -> list[str]:
        self._fail_if_told("launch")
        handles = []
        for spec in specs:
            self._check_spec(spec)
            handle = self.handle(job_key, spec.host)
            handles.append(handle)
            agent = self._agents.get((job_key, spec.host))
            if agent is not None and spec.attempt <= agent.attempt:
                continue  # launched already: never twice
            if handle in self._runs and agent is None:
                continue  # a warm pool's job runs here (the local backend's agent.pid)
            if agent is not None and agent.alive and not self._runs[agent.current].ended:
                self._misuse(f"launch of attempt {spec.attempt} on {handle} while it still runs")
            if agent is not None:
                agent.alive = False  # the last attempt's agent is gone; a fresh one starts
            agent = self._agents[(job_key, spec.host)] = Agent(
                job_key, spec.host, spec.attempt, current=handle
            )
            self._runs[handle] = Run(job_key, spec.host, spec, agent)
            self.launched.append((job_key, spec))
        return handles

    def assign(self, home_key: str, job_key: str, specs: Sequence[JobSpec]) -> list[str]:
        self._fail_if_told("assign")
        handles = []
        for spec in specs:
            self._check_spec(spec)
            handle = self.handle(job_key, spec.host)
            handles.append(handle)
            agent = self._agents.get((home_key, spec.host))
            if agent is None:
                # The local backend copies the home's agent.pid: no home, no file.
                raise FileNotFoundError(
                    errno.ENOENT, "no warm pool instance", self.handle(home_key, spec.host)
                )
            if handle in self._runs:
                continue  # handed over already: only woken again
            busy = self._runs.get(agent.current)
            if agent.alive and busy is not None and not busy.ended:
                self._misuse(f"{handle} handed to {agent.current}'s instance while it runs")
            self._runs[handle] = Run(job_key, spec.host, spec, agent)
            agent.current = handle
            self.assigned.append((home_key, job_key, spec.host))
        return handles

    def release(self, home_key: str, hosts: list[str]) -> bool:
        self.releases.append((home_key, tuple(hosts)))
        gone = True
        for host in hosts:
            agent = self._agents.get((home_key, host))
            if agent is None:
                continue
            if agent.alive:
                run = self._runs.get(agent.current)
                if run is not None and not run.ended:
                    self._misuse(f"release of {home_key}/{host} while it runs {agent.current}")
                # Told to go: it deletes its cache and exits, but runs as it is told.
                gone = False
                agent.alive = False
                agent.released = True
        return gone

    def healthy(self, home_key: str, hosts: list[str]) -> bool:
        return all(
            (agent := self._agents.get((home_key, host))) is not None and agent.alive
            for host in hosts
        )

    def handle(self, job_key: str, host: str) -> str:
        return f"{job_key}/{host}"

    def poll(self, handle: str) -> InstanceState:
        run = self._runs.get(handle)
        return InstanceState(**(LAUNCHING if run is None else run.state))

    def stop(self, handle: str) -> None:
        self.stops.append(handle)
        run = self._runs.get(handle)
        if run is not None:
            run.stop_requested = True

    def alive(self, handle: str) -> bool:
        run = self._runs.get(handle)
        return run is not None and run.agent.alive

    def purge(self, job_key: str) -> bool:
        self.purges.append(job_key)
        left = False
        for handle, run in list(self._runs.items()):
            if run.job_key != job_key:
                continue
            home = self._agents.get((job_key, run.host))
            if home is not None and home.alive:
                left = True  # a warm pool handed on lives in its home
                continue
            del self._runs[handle]
            self._agents.pop((job_key, run.host), None)
            self._logs.pop((job_key, run.host), None)
            self._metrics.pop((job_key, run.host), None)
        return not left

    @property
    def records(self) -> InstanceRecords:
        return self._records

    # ------------------------------------------------------------------ scripting

    def report(
        self, job_key: str, host: str = "algo-1", phase: Phase = "training", **fields: Any
    ) -> None:
        """The instance's agent reports a phase (and any `InstanceState` fields); its
        times default to the clock's now, as an agent stamps them."""
        run = self._run(job_key, host)
        if not run.agent.alive:
            raise Misuse(f"{run.job_key}/{host}'s agent is dead: it reports nothing")
        now = self._clock.now().isoformat()
        state = dict(run.state)
        if phase != "launching":
            state.setdefault("started_at", now)
        if phase in ("training", "uploading"):
            state.setdefault("training_started_at", now)
        if phase == "training":
            state["pid"] = 4242
        if phase in ENDED:
            state.setdefault("ended_at", now)
            state["pid"] = None
        state.update(fields, phase=phase)
        run.state = InstanceState(**state)  # type: ignore[typeddict-item]
        if run.ended and run.spec.keep_alive_seconds <= 0:
            run.agent.alive = False  # nothing to keep: the agent shuts down
        self._wakes.add(job_key)

    def finish(self, job_key: str, phase: Phase = "completed", **fields: Any) -> None:
        """Every instance of the job ends so (after training, unless it never reported)."""
        for run in self.runs_of(job_key):
            self.report(job_key, run.host, phase, **fields)

    def kill(self, job_key: str, host: str | None = None) -> None:
        """The instance's agent dies (the machine, an OOM kill): no report, no wake-up."""
        for run in self.runs_of(job_key):
            if host is None or run.host == host:
                run.agent.alive = False

    def obey_stops(self) -> None:
        """Every running instance told to stop stops, as its agent does."""
        for run in list(self._runs.values()):
            if run.stop_requested and not run.ended and run.agent.alive:
                self.report(run.job_key, run.host, "stopped", stop_reason="stop")

    def log(self, job_key: str, host: str, *lines: str) -> None:
        at = int(self._clock.now().timestamp() * 1000)
        self._logs.setdefault((job_key, host), []).extend(Event(at, line) for line in lines)

    def set_metrics(self, job_key: str, host: str, latest: Latest) -> None:
        self._metrics[(job_key, host)] = dict(latest)
        self._logs.setdefault((job_key, host), [])

    def fail_next(self, member: str, *errors: BaseException) -> None:
        """The next calls of `launch` or `assign` raise these, one each."""
        self._failures.setdefault(member, []).extend(errors)

    def take_wakes(self) -> set[str]:
        """Job keys whose agents reported a change since the last take (their wake-ups)."""
        woken, self._wakes = self._wakes, set()
        return woken

    def runs_of(self, job_key: str) -> list[Run]:
        return sorted(
            (run for run in self._runs.values() if run.job_key == job_key),
            key=lambda run: run.spec.rank,
        )

    def agent_of(self, job_key: str, host: str = "algo-1") -> Agent:
        return self._run(job_key, host).agent

    def running_agents(self) -> list[Agent]:
        return [agent for agent in self._agents.values() if agent.alive]

    # ------------------------------------------------------------------ inside

    def _run(self, job_key: str, host: str) -> Run:
        run = self._runs.get(self.handle(job_key, host))
        if run is None:
            raise Misuse(f"no instance of {job_key} on {host} was launched or assigned")
        return run

    def _check_spec(self, spec: Any) -> None:
        if not isinstance(spec, JobSpec):
            self._misuse(f"a spec must be a JobSpec, not {type(spec).__name__}")
        if spec.host not in spec.hosts:
            self._misuse(f"host {spec.host!r} is not one of {spec.hosts!r}")

    def _fail_if_told(self, member: str) -> None:
        failures = self._failures.get(member)
        if failures:
            raise failures.pop(0)

    def _misuse(self, what: str) -> None:
        self.misuse.append(what)
        raise Misuse(what)


class FakeBackend:
    """The `Backend` protocol's ten members, and nothing more, over `FakeInstances`."""

    def __init__(self, instances: FakeInstances) -> None:
        self._instances = instances

    def launch(self, job_key: str, specs: Sequence[JobSpec]) -> list[str]:
        return self._instances.launch(job_key, specs)

    def assign(self, home_key: str, job_key: str, specs: Sequence[JobSpec]) -> list[str]:
        return self._instances.assign(home_key, job_key, specs)

    def release(self, home_key: str, hosts: list[str]) -> bool:
        return self._instances.release(home_key, hosts)

    def healthy(self, home_key: str, hosts: list[str]) -> bool:
        return self._instances.healthy(home_key, hosts)

    def handle(self, job_key: str, host: str) -> str:
        return self._instances.handle(job_key, host)

    def poll(self, handle: str) -> InstanceState:
        return self._instances.poll(handle)

    def stop(self, handle: str) -> None:
        self._instances.stop(handle)

    def alive(self, handle: str) -> bool:
        return self._instances.alive(handle)

    def purge(self, job_key: str) -> bool:
        return self._instances.purge(job_key)

    @property
    def records(self) -> InstanceRecords:
        return self._instances.records
