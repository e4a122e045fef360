"""The SageMaker container contract, laid out under an instance root.

Training code written for SageMaker finds everything through `/opt/ml` and the `SM_*`
environment the SageMaker training toolkit sets. Giving each instance a real `/opt/ml`
needs a private mount namespace (a later step), so for now every container path P lives
at `ROOT/P` (`/opt/ml/model` is `ROOT/opt/ml/model`) and every `SM_*` variable points
there; `DOCKYARD_CONTAINER_ROOT` (= ROOT) lets code that hard-codes `/opt/ml/...` (such as
checkpoint directories) find its files until the namespace arrives.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
        return self.container(spec.checkpoint_local_path)

    @property
    def warm_pool_cache(self) -> Path:
        """SPEC §5.5: kept from job to job on a pool, deleted when the pool terminates."""
        return self.opt_ml / "sagemaker" / "warmpoolcache"

    @property
    def venv(self) -> Path:
        return self.root / "venv"

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
        return self.run_dir / "logs" / "output.jsonl"

    # ... and the instance's: its process, and how a warm pool is handed its next job.
    @property
    def pid_file(self) -> Path:
        return self.root / "agent.pid"

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
        """A fresh /opt/ml for the next job on a pool: everything but the pool's cache."""
        keep = self.warm_pool_cache
        for entry in list(self.opt_ml.iterdir()) if self.opt_ml.is_dir() else []:
            if entry == keep.parent:
                for inner in entry.iterdir():
                    if inner != keep:
                        _remove(inner)
                continue
            _remove(entry)

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
    if path.is_dir() and not path.is_symlink():
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
    except ValueError:
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


def build_env(spec: JobSpec, layout: Layout) -> dict[str, str]:
    """The user process's environment: ours (PATH, HOME...), the job's, then the contract's."""
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
        "num_gpus": 0,
        "output_data_dir": str(layout.output_data_dir),
        "output_dir": str(layout.output_dir),
        "output_intermediate_dir": str(layout.output_dir / "intermediate"),
        "resource_config": resource_config(spec),
        "user_entry_point": program,
    }
    env = dict(os.environ)
    env.update(spec.environment)
    env.update(
        {
            "SM_HOSTS": json.dumps(spec.hosts),
            "SM_CURRENT_HOST": spec.host,
            "SM_CURRENT_INSTANCE_TYPE": spec.instance_type,
            "SM_NUM_GPUS": "0",
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
            "DOCKYARD_CONTAINER_ROOT": str(layout.root),
        }
    )
    if layout.warm_pool_cache.is_dir():
        env[CACHE_VARIABLE] = str(layout.warm_pool_cache)
    for name, directory in channel_dirs.items():
        env[f"SM_CHANNEL_{name.upper()}"] = directory
    for key, value in hps.items():
        env[f"SM_HP_{key.upper()}"] = _env_text(value)
    return env


def mounts_opt_ml(spec: JobSpec) -> bool:
    """Whether the job sees its tree at the real /opt/ml: in a private mount namespace,
    where the host lets us make one (root, with unshare and mount); else under ROOT."""
    if spec.mount_opt_ml is not None:
        return spec.mount_opt_ml
    return _can_mount()


@functools.cache
def _can_mount() -> bool:
    # What the host allows does not change while an agent runs; PATH lookups add up.
    return os.geteuid() == 0 and bool(shutil.which("unshare")) and bool(shutil.which("mount"))


def container_env(env: dict[str, str], layout: Layout) -> dict[str, str]:
    """The environment as the job sees it when /opt/ml is mounted: paths under /opt/ml."""
    inside = str(layout.opt_ml)
    view = {
        key: value.replace(inside, "/opt/ml")
        if key.startswith("SM_") or key == CACHE_VARIABLE
        else value
        for key, value in env.items()
    }
    view["DOCKYARD_CONTAINER_ROOT"] = "/"
    return view


def build_command(spec: JobSpec, layout: Layout) -> list[str]:
    """The job's command, in namespaces of its own where the job or the contract needs them.

    `/opt/ml` is bind-mounted from the instance's tree in a private mount namespace (so
    jobs side by side each see their own), and EnableNetworkIsolation adds a network
    namespace with only loopback. Both need the privilege to create namespaces; a job
    that asked for isolation fails to start without it rather than run with a network.
    """
    command = job_command(spec, layout)
    # Found here, not by the shell that wraps it, so a missing program reads as such.
    if (
        shutil.which(command[0], path=os.environ.get("PATH")) is None
        and not (layout.code_dir / command[0]).is_file()
    ):
        raise ValueError(f"cannot run {command[0]}: no such program")
    return wrap_command(spec, layout, command)


def wrap_command(spec: JobSpec, layout: Layout, command: list[str]) -> list[str]:
    """`command` in the namespaces the job needs (see `build_command`)."""
    flags: list[str] = []
    steps: list[str] = []
    if mounts_opt_ml(spec):
        flags += ["--mount", "--propagation", "private"]
        steps.append(f"mkdir -p /opt/ml && mount --bind {shlex.quote(str(layout.opt_ml))} /opt/ml")
        # Every host of a job is this machine: algo-1..N resolve to loopback, so a job
        # can rendezvous by host name as it would on SageMaker.
        hosts = layout.root / "hosts"
        try:
            system = Path("/etc/hosts").read_text()
        except OSError:
            system = "127.0.0.1 localhost\n"
        text = system.rstrip("\n") + "\n127.0.0.1 " + " ".join(spec.hosts) + "\n"
        if not hosts.is_file() or hosts.read_text() != text:
            hosts.write_text(text)
        steps.append(f"mount --bind {shlex.quote(str(hosts))} /etc/hosts")
    if spec.network_isolation:
        flags.append("--net")
        # A new network namespace starts with its loopback down.
        steps.append("{ ip link set lo up 2>/dev/null || true; }")
    if not flags:
        return command
    script = " && ".join([*steps, 'exec "$@"'])
    return ["unshare", *flags, "--", "sh", "-c", script, "sh", *command]


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
