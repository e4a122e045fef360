"""A job's output, as it prints it: its log, its metrics, the moment of its first line.

Every line the job prints becomes an event of its log (`wire.log_format`), and each of its
MetricDefinitions is scraped from it as it arrives (`domain.metrics`). That work is as
much as the job makes it: a job printing empty lines as fast as it can makes the reader
write ~46 bytes of log and index for each byte it printed. So the reader runs in the
job's cgroup (`agent.charged`: a child of the agent's that joins it), where its CPU is
the job's own; the log is on the instance's volume (`agent.volume` counts it). Only
the first line's time comes back to the agent, over a pipe, for its state.
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Callable
from typing import IO

from dockyard.clock import monotonic, wall_now
from dockyard.compute.agent.charged import charged
from dockyard.compute.sandbox.limits import Cgroup
from dockyard.compute.wire.layout import Layout
from dockyard.compute.wire.log_format import LogWriter, read_metrics, write_metrics
from dockyard.compute.wire.spec import JobSpec
from dockyard.domain.metrics import Scraper

# Long enough for any line a person would read; longer ones are split, not lost.
MAX_LINE_BYTES = 64 * 1024
# How often, at most, the metrics file is rewritten while lines keep changing it.
METRICS_WRITE_SECONDS = 1.0


def collect(
    stream: IO[bytes], spec: JobSpec, layout: Layout, first_line: Callable[[str], None]
) -> None:
    """Read the job's output to its end into its log and metrics; `first_line` is told
    when the first line was read (ISO time)."""
    first = True
    scraper = Scraper(spec.metric_definitions)
    # A resumed job's stream goes on: so do its metrics.
    scraper.latest.update(read_metrics(layout.metrics_file))
    written = monotonic()
    changed = False
    with LogWriter(layout.log_file) as log:
        try:
            for raw in iter(lambda: stream.readline(MAX_LINE_BYTES), b""):
                line = raw.decode("utf-8", errors="replace").removesuffix("\n")
                line = line.removesuffix("\r")
                timestamp = log.write(int(wall_now().timestamp() * 1000), line)
                if first:
                    first = False
                    first_line(wall_now().isoformat())
                changed = scraper.feed(timestamp, line) or changed
                if changed and monotonic() - written >= METRICS_WRITE_SECONDS:
                    write_metrics(layout.metrics_file, scraper.latest)
                    written, changed = monotonic(), False
        finally:
            if scraper.patterns:
                write_metrics(layout.metrics_file, scraper.latest)


class OutputReader:
    """Collects a job's output from the moment it is made until `join`: in a child in
    the job's cgroup when it has one, else in a thread of the agent's."""

    def __init__(
        self,
        stream: IO[bytes],
        spec: JobSpec,
        layout: Layout,
        cgroup: Cgroup | None,
        first_line: Callable[[str], None],
        running: set[int],
    ) -> None:
        self._first_line = first_line
        self._told = False
        self._pipe: tuple[int, int] | None = None
        if cgroup is None:
            self._target = lambda: collect(stream, spec, layout, first_line)
        else:
            self._pipe = os.pipe()
            read_end, write_end = self._pipe

            def in_child() -> None:
                os.close(read_end)
                collect(stream, spec, layout, lambda at: _tell(write_end, at))

            self._target = lambda: charged(cgroup, in_child, running)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._target()
        except Exception:
            pass  # the log ends where it ended; the job's end says the rest
        finally:
            if self._pipe is not None:
                os.close(self._pipe[1])  # the child has gone: the reader sees the end

    def poll(self) -> None:
        """Pass on the first line's time, once the child has sent it."""
        if self._pipe is None or self._told:
            return
        read_end = self._pipe[0]
        if select.select([read_end], [], [], 0)[0]:
            data = os.read(read_end, 256)
            self._told = True
            if data.strip():
                self._first_line(data.decode().strip())

    def join(self, timeout: float) -> None:
        self._thread.join(timeout=timeout)
        self.poll()
        if self._pipe is not None and not self._thread.is_alive():
            os.close(self._pipe[0])
            self._pipe = None


def _tell(fd: int, at: str) -> None:
    os.write(fd, at.encode() + b"\n")
