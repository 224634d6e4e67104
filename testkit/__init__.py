"""What only the tests and the benchmarks use: drivers and oracles that are no part of the product.

- ``sysfs_writer``: writes any ``Topology`` as a kernel-style sysfs tree;
- ``kubelet_baseline``: the kubelet static policy's CPU choice, to compare placements with;
- ``churn``: the long randomized soak against the real agent process (``python -m benchmarks sync``);
- ``crashsoak``: random work with the agent killed and restarted, every cycle checked
  (``scripts/crash-soak``); ``agentfork`` starts its agent processes from a fork server.

It lives beside ``tests/`` and ``benchmarks/``, outside ``src/``: the package (and the
agent image) does not ship it. Run from the repository root, or with it on ``PYTHONPATH``.
"""
