"""topology_to_dict / topology_from_dict: exact round trips, field-naming errors."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from topodra.topology import TopologyError, read_topology, synthetic_topology
from topodra.topology.fixtures import fixture_names, unpacked_fixture
from topodra.topology.serialize import topology_from_dict, topology_to_dict


@pytest.mark.parametrize("name", fixture_names())
def test_fixture_round_trips_through_json_and_yaml(name: str) -> None:
    t = read_topology(unpacked_fixture(name))
    d = topology_to_dict(t)
    assert topology_from_dict(json.loads(json.dumps(d))) == t
    text = yaml.dump(d, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))
    assert topology_from_dict(yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))) == t


@pytest.mark.parametrize("spec", ["1s8c2t", "2s1d2n2l8c2t", "1s6c2t8e+hbm", "2s2d1n1l4c1t+cxl+pmem"])
def test_synthetic_round_trips(spec: str) -> None:
    t = synthetic_topology(spec)
    back = topology_from_dict(topology_to_dict(t))
    assert back == t
    assert back.cpus_of_node(0) == t.cpus_of_node(0)
    assert back.distance(0, 1) == t.distance(0, 1)


def _base() -> dict[str, Any]:
    return topology_to_dict(synthetic_topology("1s2c2t"))


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.pop("schema"), "schema"),
        (lambda d: d.update(schema=99), "schema"),
        (lambda d: d["cpus"][1].update(package="zero"), "cpus[1].package"),
        (lambda d: d["cpus"][0].update(siblings="0-x"), "cpus[0].siblings"),
        (lambda d: d["cpus"][0].update(siblings="1"), "cpus[0].siblings"),
        (lambda d: d["cpus"][0].update(core_type="turbo"), "cpus[0].core_type"),
        (lambda d: d["cpus"][0].update(node=7), "cpus[0].node"),
        (lambda d: d["cpus"].append(copy.deepcopy(d["cpus"][0])), "cpus[4].id"),
        (lambda d: d["nodes"][0].update(kind="SRAM"), "nodes[0].kind"),
        (lambda d: d["nodes"][0].pop("memory_bytes"), "nodes[0].memory_bytes"),
        (lambda d: d["nodes"][0].update(memory_bytes=-1), "nodes[0].memory_bytes"),
        (lambda d: d["cpus"][2].update(max_freq_khz=-5), "cpus[2].max_freq_khz"),
        (lambda d: d["caches"][0].update(level=0), "caches[0].level"),
        (lambda d: d["distances"].update(matrix=[[10, 20]]), "distances.matrix[0]"),
        (lambda d: d["distances"].update(matrix=[["near"]]), "distances.matrix[0][0]"),
        (lambda d: d["cpu_sets"].update(online="3-1"), "cpu_sets.online"),
        (lambda d: d.update(cpus="all"), "cpus"),
    ],
)
def test_bad_input_names_the_field(mutate: Any, field: str) -> None:
    d = _base()
    mutate(d)
    with pytest.raises(TopologyError) as exc:
        topology_from_dict(d)
    assert str(exc.value).startswith(field + ":"), str(exc.value)


def test_not_a_mapping() -> None:
    with pytest.raises(TopologyError, match="expected a mapping"):
        topology_from_dict(["not", "a", "topology"])
