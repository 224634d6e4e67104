"""Test doubles and oracles: never imported by the node agent.

The embedded NRI runtime (with containerd's rules), the Kubernetes API server
double and its store and validation, the sysfs tree writer, the hwloc
comparison, the hwloc fixture trees and the kubelet static-policy baseline.
The playground runs some of them as its embedded peers; the tests and the
benchmarks use them as peers and oracles. ``tests/agent/test_import_closure.py``
checks that the agent's import closure holds none of them.
"""
