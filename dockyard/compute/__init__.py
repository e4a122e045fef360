"""What runs jobs: `backends/` (the control plane's side of the seam), `agent/` (one per
instance, root on its host), `sandbox/` (what confines a job), `wire/` (what the two
sides hand each other)."""
