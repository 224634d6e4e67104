"""Test oracles and drivers: never imported by the node agent.

The sysfs tree writer, the kubelet static-policy baseline, the soak drivers and
the allocator's reference search. The playground's embedded peers are in
``topodra.embedded``; the hwloc fixture trees and the hwloc comparison are in
``topodra.topology``. ``tests/agent/test_import_closure.py`` checks that the
agent's import closure holds none of them.
"""
