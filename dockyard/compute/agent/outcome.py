"""How an instance's end reads: the exit code a container reports, and the reason a
failed job gives (FailureReason), in SageMaker's words."""

from __future__ import annotations

import signal

from dockyard.compute.wire.spec import JobSpec

# What a FailureReason holds at most (the model's limit).
MAX_REASON = 1024


def exit_code(code: int) -> int:
    """A container's exit code: 128 + N for a process killed by signal N, as Docker (and
    so SageMaker) reports it, whether the sandbox or Python saw the death."""
    return 128 - code if code < 0 else code


def describe_exit(code: int) -> str:
    if code > 128:
        try:
            name = signal.Signals(code - 128).name
        except ValueError:
            name = "unknown signal"
        return f"AlgorithmError: ExitCode {code}: killed by signal {code - 128} ({name})"
    return f"AlgorithmError: ExitCode {code}"


def out_of_memory(spec: JobSpec) -> str:
    limit = spec.sandbox.get("limits", {}).get("memory_bytes")
    size = f" ({int(limit) / 1024**3:g} GiB)" if isinstance(limit, (int, float)) else ""
    return (
        f"ClientError: OutOfMemoryError: the job ran out of memory: it needed more than the "
        f"memory of one {spec.instance_type} instance{size}, and a process of the job was "
        "killed. Use an instance type with more memory, or reduce the memory the job uses."
    )


def failure_reason(written: str, code: int) -> str:
    """A failed job's FailureReason: what it wrote to /opt/ml/output/failure, else its
    exit. The job's own words, as SageMaker shows them: an algorithm's error, never one
    that reads as the platform's (InternalServerError, which also keeps no warm pool) or
    as the agent's (ClientError)."""
    # Control and bidirectional-override characters go: a reason is read by people, on
    # terminals and in the console, and must say what it says.
    text = "".join(c for c in written if c in "\t\n" or c.isprintable()).strip()
    if not text:
        return describe_exit(code)
    # Always the algorithm's, even if it claims to be the client's: a job's file must not
    # read as one of the agent's own ClientError reasons (out of memory, a missing input).
    if not text.startswith("AlgorithmError:"):
        text = f"AlgorithmError: {text}"
    return text[:MAX_REASON]
