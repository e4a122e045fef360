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
import shutil
from pathlib import Path
from typing import Any

from dockyard.compute.agent.files import freeze, is_real_dir, take_back
from dockyard.compute.wire.layout import Layout
from dockyard.compute.wire.spec import JobSpec

GROUP = "homogeneousCluster"
# Every host of a job runs on this machine, so they meet on the loopback interface.
INTERFACE = "lo"
MASTER_ADDR = "127.0.0.1"
CACHE_VARIABLE = "SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY"


def reset_for_next_job(layout: Layout) -> None:
    """A fresh /opt/ml for the next job on a pool: everything but the pool's cache.

    The last job may have left links anywhere (`sagemaker -> /etc`): only a real
    directory is looked into, anything else is removed as what it is.
    """
    keep = layout.warm_pool_cache
    if not is_real_dir(layout.opt_ml):
        _remove(layout.opt_ml)
        return
    # Root's already after a job that ran; not after one that failed before it did.
    freeze(layout.opt_ml, skip=keep)
    take_back(layout.opt_ml)
    for entry in list(layout.opt_ml.iterdir()):
        if entry == keep.parent and is_real_dir(entry):
            take_back(entry)
            for inner in list(entry.iterdir()):
                if inner != keep or not is_real_dir(inner):
                    _remove(inner)
            continue
        _remove(entry)


def remove_instance_files(layout: Layout) -> None:
    """An ended instance's own files, all but its runs' state, logs and specs (rmtree
    works by descriptor: a link the job left is removed as a link)."""
    for path in (layout.root / "opt", layout.venv, layout.root / "sandbox", layout.root / "tmp"):
        _remove(path)
    for path in (layout.venv_marker, layout.next_file, layout.wake_fifo):
        path.unlink(missing_ok=True)


def make_dirs(layout: Layout, spec: JobSpec) -> None:
    for path in (
        layout.config_dir,
        layout.data_dir,
        layout.model_dir,
        layout.output_data_dir,
        layout.output_dir / "intermediate",
        layout.checkpoint_dir(spec),
        layout.log_file.parent,
    ):
        # A stat first: on a warm pool the tree is laid out already, and mkdir's
        # FileExistsError costs more than the look.
        if not path.is_dir():
            path.mkdir(parents=True, exist_ok=True)
    if spec.keep_alive_seconds > 0:
        layout.warm_pool_cache.mkdir(parents=True, exist_ok=True)


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
