"""The playground's embedded peers: stand-ins for what surrounds a node agent, run in-process.

- ``runtime``: an NRI container runtime with containerd's rules (``EmbeddedRuntime``), its
  components in ``runtime_store``, ``runtime_plugins``, ``runtime_events``, ``runtime_cri``;
- ``apiserver``: a Kubernetes API server over HTTP (``ApiServer``), with its object
  ``store``, the API's ``validation`` rules and server-side ``apply`` of claim status.

The playground runs the real agent against them; the tests and the benchmarks use
them as peers and oracles. They never run on a node: ``tests/agent/test_import_closure.py``
checks that the agent's import closure holds none of them.
"""
