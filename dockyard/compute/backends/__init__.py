"""The control plane's side of the seam: the backends that run instances (`protocol`,
`registry`), the local one and the Ray one, and what they read back of their instances."""
