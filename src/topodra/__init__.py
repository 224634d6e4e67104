"""topodra: topology-aware CPU and memory placement for Kubernetes, with DRA."""

__version__ = "0.1.0"
