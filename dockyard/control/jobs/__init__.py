"""The jobs reconciler (`reconciler`), split by the state a job is in: `placing`
(queued), `running` (followed), `ending` (settled); `queue` picks the jobs a pass steps
and `specs` what each instance is told."""

from dockyard.control.jobs.reconciler import JobsReconciler

__all__ = ["JobsReconciler"]
