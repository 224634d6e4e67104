"""Test oracles: never imported by the node agent.

``simref`` is the allocator's plain reference search, the oracle the fast
allocator is checked against. The playground's embedded peers are in
``topodra.embedded``, the hwloc fixture trees and the hwloc comparison in
``topodra.topology``, and what only the tests and benchmarks use in the
repository's ``testkit/``. ``tests/agent/test_import_closure.py`` checks that
the agent's import closure holds none of them.
"""
