"""Built-in simulator workloads (Kubernetes YAML, package data)."""
