"""ResourceConfig.VolumeSizeInGB, held to while the job writes.

On SageMaker the volume is a disk of that size: a job that fills it gets "no space
left". Here an instance's tree and home are directories of the host's disk, so the
agent measures what the job has written there every few seconds - each file counted
by the larger of the size it claims and the disk it uses, so a sparse file counts all
it claims - and fails the job once that is more than its volume holds, as the kubelet
evicts a pod over its ephemeral-storage limit. What it printed counts too: its log is
kept on this host. The measuring walk runs in the job's cgroup (`agent.charged`): a
job with a million files pays for counting them.
"""

from __future__ import annotations

import threading

from dockyard.compute.agent.charged import charged
from dockyard.compute.agent.confinement import Confinement
from dockyard.compute.agent.data import volume_bytes, written_bytes
from dockyard.compute.sandbox.bwrap import SandboxDirs
from dockyard.compute.wire.layout import Layout
from dockyard.compute.wire.spec import JobSpec

# How often what the job wrote is measured.
CHECK_SECONDS = 5.0


class VolumeWatch:
    """Measures the job's writes in a thread of its own while the job runs; `over` is
    the failure reason once they outgrow the volume."""

    def __init__(self, spec: JobSpec, layout: Layout, confinement: Confinement) -> None:
        self.limit = volume_bytes(spec)
        self.layout = layout
        self.confinement = confinement
        self.over: str | None = None
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        if confinement.sandbox is not None:
            self._thread = threading.Thread(target=self._watch, name="volume", daemon=True)
            self._thread.start()

    def measure(self) -> int:
        """The instance's tree and home, and the job's log (what it printed, kept on
        this host: on SageMaker the log leaves the instance, here it stays on it)."""
        home = SandboxDirs(self.layout.root).home
        logs = self.layout.log_file.parent
        return written_bytes(self.layout.root, [self.layout.opt_ml, home]) + written_bytes(
            self.layout.run_dir, [logs]
        )

    def _watch(self) -> None:
        while not self._stopped.wait(CHECK_SECONDS):
            try:
                used = charged(self.confinement.cgroup, self.measure)
            except Exception:
                continue  # measured again at the next look
            if used > self.limit:
                self.over = (
                    f"ClientError: The job wrote {used / 1024**3:.2f} GiB to its instance's "
                    f"storage, more than its volume holds (ResourceConfig.VolumeSizeInGB: "
                    f"{self.limit / 1024**3:.0f} GiB)"
                )
                return

    def stop(self) -> None:
        self._stopped.set()
