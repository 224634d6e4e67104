"""Test oracles and drivers: never imported by the node agent.

The sysfs tree writer, the hwloc comparison, the hwloc fixture trees, the
kubelet static-policy baseline, the soak drivers and the allocator's reference
search. The playground's embedded peers are in ``topodra.embedded``.
``tests/agent/test_import_closure.py`` checks that the agent's import closure
holds none of them.
"""
