"""dockyard: a self-hosted control plane for GPU training capacity, speaking the SageMaker API."""

__version__ = "0.1.0"
