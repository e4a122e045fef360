"""The SageMaker container contract, laid out under an instance root.

Training code written for SageMaker finds everything through `/opt/ml` and the `SM_*`
environment the SageMaker training toolkit sets. The tree lives at `ROOT/opt/ml` on
this host; the job's sandbox binds it at the real `/opt/ml` and every `SM_*` variable
points there (`container_env`). Unconfined (`--unsafe-no-sandbox`), the job sees the
tree where it is, and `DOCKYARD_CONTAINER_ROOT` (= ROOT) lets code that hard-codes
`/opt/ml/...` find it.

The tree belongs to the job while it runs, so everything the (root) agent does to it
afterwards - packing the model, reading the failure file, emptying it for a warm
pool's next job - looks at what is there without following links out of it.
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dockyard.compute.agent_files import freeze, is_real_dir, take_back
from dockyard.compute.agent_spec import JobSpec

GROUP = "homogeneousCluster"
# Every host of a job runs on this machine, so they meet on the loopback interface.
INTERFACE = "lo"
MASTER_ADDR = "127.0.0.1"
CACHE_VARIABLE = "SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY"


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
        """SPEC §5.5: kept from job to job on a pool, deleted when the pool terminates."""
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

    def reset_for_next_job(self) -> None:
        """A fresh /opt/ml for the next job on a pool: everything but the pool's cache.

        The last job may have left links anywhere (`sagemaker -> /etc`): only a real
        directory is looked into, anything else is removed as what it is.
        """
        keep = self.warm_pool_cache
        if not is_real_dir(self.opt_ml):
            _remove(self.opt_ml)
            return
        # Root's already after a job that ran; not after one that failed before it did.
        freeze(self.opt_ml, skip=keep)
        take_back(self.opt_ml)
        for entry in list(self.opt_ml.iterdir()):
            if entry == keep.parent and is_real_dir(entry):
                take_back(entry)
                for inner in list(entry.iterdir()):
                    if inner != keep or not is_real_dir(inner):
                        _remove(inner)
                continue
            _remove(entry)

    def remove_instance_files(self) -> None:
        """An ended instance's own files, all but its runs' state, logs and specs (rmtree
        works by descriptor: a link the job left is removed as a link)."""
        for path in (self.root / "opt", self.venv, self.root / "sandbox", self.root / "tmp"):
            _remove(path)
        for path in (self.venv_marker, self.next_file, self.wake_fifo):
            path.unlink(missing_ok=True)

    def make_dirs(self, spec: JobSpec) -> None:
        for path in (
            self.config_dir,
            self.data_dir,
            self.model_dir,
            self.output_data_dir,
            self.output_dir / "intermediate",
            self.checkpoint_dir(spec),
            self.log_file.parent,
        ):
            # A stat first: on a warm pool the tree is laid out already, and mkdir's
            # FileExistsError costs more than the look.
            if not path.is_dir():
                path.mkdir(parents=True, exist_ok=True)
        if spec.keep_alive_seconds > 0:
            self.warm_pool_cache.mkdir(parents=True, exist_ok=True)


def _remove(path: Path) -> None:
    # rmtree works by descriptor and never follows a link (a link is unlinked).
    if is_real_dir(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def channel_names(spec: JobSpec) -> list[str]:
    return [str(channel["ChannelName"]) for channel in spec.input_data_config]


def resource_config(spec: JobSpec) -> dict[str, Any]:
    return {
        "current_host": spec.host,
        "hosts": list(spec.hosts),
        "current_group_name": GROUP,
        "current_instance_type": spec.instance_type,
        "instance_groups": [
            {
                "instance_group_name": GROUP,
                "instance_type": spec.instance_type,
                "hosts": list(spec.hosts),
            }
        ],
        "network_interface_name": INTERFACE,
    }


def input_data_config(spec: JobSpec) -> dict[str, dict[str, str]]:
    config: dict[str, dict[str, str]] = {}
    for channel in spec.input_data_config:
        source = channel.get("DataSource", {}).get("S3DataSource", {})
        entry = {}
        if channel.get("ContentType"):
            entry["ContentType"] = str(channel["ContentType"])
        # Only File mode exists here; Pipe and FastFile jobs get their data as files too.
        entry["TrainingInputMode"] = "File"
        entry["S3DistributionType"] = str(source.get("S3DataDistributionType", "FullyReplicated"))
        entry["RecordWrapperType"] = str(channel.get("RecordWrapperType", "None"))
        config[str(channel["ChannelName"])] = entry
    return config


def write_config(spec: JobSpec, layout: Layout) -> None:
    files = {
        "hyperparameters.json": spec.hyperparameters,
        "resourceconfig.json": resource_config(spec),
        "inputdataconfig.json": input_data_config(spec),
    }
    for name, content in files.items():
        (layout.config_dir / name).write_text(json.dumps(content, indent=2))


def decode_value(value: str) -> Any:
    """A hyperparameter as the toolkit hands it to code: JSON where it parses."""
    try:
        return json.loads(value)
    except (ValueError, RecursionError):  # "[[[[...": the job's string, passed as text
        return value


def user_hyperparameters(spec: JobSpec) -> dict[str, Any]:
    """The job's own hyperparameters; `sagemaker_*` ones configure the toolkit, not the job."""
    return {
        k: decode_value(v)
        for k, v in sorted(spec.hyperparameters.items())
        if not k.startswith("sagemaker_")
    }


def _arg_text(value: Any) -> str:
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items()))
    return str(value)


def user_args(hyperparameters: dict[str, Any]) -> list[str]:
    """Hyperparameters as command-line flags, as the toolkit passes them to a script."""
    args: list[str] = []
    for key in sorted(hyperparameters):
        args += [f"--{key}" if len(key) > 1 else f"-{key}", _arg_text(hyperparameters[key])]
    return args


def _env_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def script_name(value: str | None) -> str | None:
    """sagemaker_program and friends arrive JSON-quoted from the SageMaker SDK."""
    if value is None:
        return None
    decoded = decode_value(value)
    return decoded if isinstance(decoded, str) else value


def build_env(spec: JobSpec, layout: Layout, base: dict[str, str]) -> dict[str, str]:
    """The user process's environment: `base` (PATH, HOME...), the job's, then the contract's."""
    hps = user_hyperparameters(spec)
    channels = channel_names(spec)
    program = script_name(spec.program) or ""
    module_dir = script_name(spec.submit_directory) or ""
    module_name = program.removesuffix(".py")
    channel_dirs = {name: str(layout.data_dir / name) for name in channels}
    args = user_args(hps)
    training_env = {
        "additional_framework_parameters": {
            k: decode_value(v)
            for k, v in spec.hyperparameters.items()
            if k.startswith("sagemaker_")
        },
        "channel_input_dirs": channel_dirs,
        "current_host": spec.host,
        "current_instance_type": spec.instance_type,
        "hosts": spec.hosts,
        "hyperparameters": hps,
        "input_config_dir": str(layout.config_dir),
        "input_data_config": input_data_config(spec),
        "input_dir": str(layout.input_dir),
        "job_name": spec.job_name,
        "master_hostname": spec.hosts[0],
        "model_dir": str(layout.model_dir),
        "module_dir": module_dir,
        "module_name": module_name,
        "network_interface_name": INTERFACE,
        "num_cpus": os.cpu_count() or 1,
        "num_gpus": len(spec.gpus),
        "output_data_dir": str(layout.output_data_dir),
        "output_dir": str(layout.output_dir),
        "output_intermediate_dir": str(layout.output_dir / "intermediate"),
        "resource_config": resource_config(spec),
        "user_entry_point": program,
    }
    # Nothing of the agent's own environment (the server's): the base a sandbox gives
    # every process (PATH, HOME, LANG), then the job's Environment, then the contract.
    env = dict(base)
    env.update(spec.environment)
    env.update(
        {
            "SM_HOSTS": json.dumps(spec.hosts),
            "SM_CURRENT_HOST": spec.host,
            "SM_CURRENT_INSTANCE_TYPE": spec.instance_type,
            "SM_NUM_GPUS": str(len(spec.gpus)),
            "SM_NUM_CPUS": str(os.cpu_count() or 1),
            "SM_MODEL_DIR": str(layout.model_dir),
            "SM_OUTPUT_DATA_DIR": str(layout.output_data_dir),
            "SM_OUTPUT_DIR": str(layout.output_dir),
            "SM_OUTPUT_INTERMEDIATE_DIR": str(layout.output_dir / "intermediate"),
            "SM_INPUT_DIR": str(layout.input_dir),
            "SM_INPUT_CONFIG_DIR": str(layout.config_dir),
            "SM_INPUT_DATA_DIR": str(layout.data_dir),
            "SM_INPUT_DATA_CONFIG": json.dumps(input_data_config(spec)),
            "SM_RESOURCE_CONFIG": json.dumps(resource_config(spec)),
            "SM_CHANNELS": json.dumps(channels),
            "SM_HPS": json.dumps(hps),
            "SM_NETWORK_INTERFACE_NAME": INTERFACE,
            "SM_TRAINING_ENV": json.dumps(training_env),
            "SM_USER_ARGS": json.dumps(args),
            "SM_MODULE_DIR": module_dir,
            "SM_MODULE_NAME": module_name,
            "SM_USER_ENTRY_POINT": program,
            "MASTER_ADDR": MASTER_ADDR,
            "MASTER_PORT": str(spec.master_port),
            "WORLD_SIZE": str(len(spec.hosts)),
            "RANK": str(spec.rank),
            # How many times the job was interrupted and resumed (a plan's block ended).
            "SM_RESTART_COUNT": str(spec.attempt - 1),
            "SM_IS_RESTART": "true" if spec.attempt > 1 else "false",
            "PYTHONUNBUFFERED": "1",
            "TRAINING_JOB_NAME": spec.job_name,
            "TRAINING_JOB_ARN": spec.job_arn,
        }
    )
    if layout.warm_pool_cache.is_dir():
        env[CACHE_VARIABLE] = str(layout.warm_pool_cache)
    # The instance's GPUs, by the host's numbering (only their devices are in its
    # sandbox); an instance without GPUs gets none, not the host's.
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(gpu) for gpu in spec.gpus)
    for name, directory in channel_dirs.items():
        env[f"SM_CHANNEL_{name.upper()}"] = directory
    for key, value in hps.items():
        env[f"SM_HP_{key.upper()}"] = _env_text(value)
    return env


def container_env(env: dict[str, str], layout: Layout) -> dict[str, str]:
    """The environment as a sandboxed job sees it: its tree at /opt/ml."""
    inside = str(layout.opt_ml)
    return {
        key: value.replace(inside, "/opt/ml")
        if key.startswith("SM_") or key == CACHE_VARIABLE
        else value
        for key, value in env.items()
    }


def job_command(spec: JobSpec, layout: Layout) -> list[str]:
    """ContainerEntrypoint + ContainerArguments, or script mode's `python PROGRAM --hp v`."""
    if spec.entrypoint:
        command = list(spec.entrypoint) + list(spec.arguments or [])
        # There is no image here: "python" means the interpreter the job was given.
        if command[0] in ("python", "python3"):
            command[0] = spec.python
        return command
    program = script_name(spec.program)
    if program:
        return [spec.python, program, *user_args(user_hyperparameters(spec))]
    raise ValueError("the job has neither a ContainerEntrypoint nor a sagemaker_program to run")
