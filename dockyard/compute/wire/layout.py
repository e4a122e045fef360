"""Where an instance's files live under its root: the SageMaker container contract
(`/opt/ml`) and the files the control plane and the agent hand each other (job.json,
state.json, logs, stop, next.json, the wake FIFO). Both sides read paths from here; only
the agent changes the tree (`agent.env`).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path

from dockyard.compute.wire.spec import JobSpec


@dataclass(frozen=True)
class Layout:
    """Where each file of the contract, and of the agent's own protocol, lives.

    `root` is the instance's home: its /opt/ml, its Python environment, its warm pool
    cache. `run` is where one job's files are (job.json in; state, logs, stop): the
    home itself for the job that launched the instance, the later job's own directory
    when a warm pool runs it (so each job's state and logs stay with that job).
    """

    root: Path
    run: Path | None = None

    @property
    def run_dir(self) -> Path:
        return self.run or self.root

    def for_run(self, run: Path) -> Layout:
        return Layout(self.root, run)

    def container(self, path: str) -> Path:
        """The instance's copy of an absolute container path."""
        return self.root / path.lstrip("/")

    @property
    def opt_ml(self) -> Path:
        return self.root / "opt" / "ml"

    @property
    def input_dir(self) -> Path:
        return self.opt_ml / "input"

    @property
    def config_dir(self) -> Path:
        return self.input_dir / "config"

    @property
    def data_dir(self) -> Path:
        return self.input_dir / "data"

    @property
    def model_dir(self) -> Path:
        return self.opt_ml / "model"

    @property
    def output_dir(self) -> Path:
        return self.opt_ml / "output"

    @property
    def output_data_dir(self) -> Path:
        return self.output_dir / "data"

    @property
    def failure_file(self) -> Path:
        return self.output_dir / "failure"

    @property
    def code_dir(self) -> Path:
        return self.opt_ml / "code"

    def checkpoint_dir(self, spec: JobSpec) -> Path:
        """CheckpointConfig.LocalPath: a directory of the job's tree, never outside it."""
        local = posixpath.normpath(spec.checkpoint_local_path or "/opt/ml/checkpoints")
        if (
            local != "/opt/ml"
            and local.startswith("/opt/ml/")
            and ".." not in local.split("/")
            # Never the warm pool's cache (the job's own between jobs) nor its parent.
            and not (local + "/").startswith("/opt/ml/sagemaker/")
        ):
            return self.container(local)
        raise ValueError(
            f"CheckpointConfig.LocalPath {spec.checkpoint_local_path!r} must be a directory "
            "under /opt/ml"
        )

    @property
    def warm_pool_cache(self) -> Path:
        """spec §5.5: kept from job to job on a pool, deleted when the pool terminates."""
        return self.opt_ml / "sagemaker" / "warmpoolcache"

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def venv_marker(self) -> Path:
        """What the venv was made for and holds; the agent's, outside the venv (which the
        install step, running the job's requirements, may write anything into)."""
        return self.root / "venv.json"

    # The agent's side of the protocol with the control plane: one job's files...
    @property
    def job_file(self) -> Path:
        return self.run_dir / "job.json"

    @property
    def state_file(self) -> Path:
        return self.run_dir / "state.json"

    @property
    def stop_file(self) -> Path:
        return self.run_dir / "stop"

    @property
    def log_file(self) -> Path:
        return self.run_dir / "logs" / "output.jsonl"  # and its index (see log_index)

    @property
    def metrics_file(self) -> Path:
        # MetricDefinitions' latest values, {name: [value, epoch ms]}, as lines arrive.
        return self.run_dir / "logs" / "metrics.json"

    # ... and the instance's: its process, and how a warm pool is handed its next job.
    @property
    def pid_file(self) -> Path:
        return self.root / "agent.pid"

    @property
    def lock_file(self) -> Path:
        """Held by the instance's agent while it lives: one agent per instance."""
        return self.root / "agent.lock"

    @property
    def next_file(self) -> Path:
        """Written by the control plane: {"run": DIR} names the next job's directory."""
        return self.root / "next.json"

    @property
    def release_file(self) -> Path:
        """Created by the control plane: the pool is terminated; clean up and exit."""
        return self.root / "release"

    @property
    def wake_fifo(self) -> Path:
        """A byte written here wakes an idle agent at once (it also looks every second)."""
        return self.root / "wake"
