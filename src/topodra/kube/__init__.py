"""Kubernetes edges: the client wrapper the agent uses and the in-memory API server double."""
