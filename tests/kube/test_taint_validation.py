"""The API server double's validation of device taints and tolerations, word for word as a real
kube-apiserver v1.36.2 (openshift/kubernetes as vendored by microshift, built and run with the 1.36
default gates) answered the same objects with ``dryRun=All``: the expected causes below are its
answers, copied as they came."""

from __future__ import annotations

import re
from typing import Any

import pytest

from topodra.embedded.store import KINDS, Store
from topodra.kube.errors import ApiError

SLICES = KINDS[("resource.k8s.io", "resourceslices")]
CLAIMS = KINDS[("resource.k8s.io", "resourceclaims")]

BAD_SLICE: dict[str, Any] = {'apiVersion': 'resource.k8s.io/v1',
 'kind': 'ResourceSlice',
 'metadata': {'name': 'n1-x'},
 'spec': {'driver': 'native.cpu',
          'nodeName': 'n1',
          'pool': {'name': 'n1', 'generation': 1, 'resourceSliceCount': 1},
          'devices': [{'name': 'cpu0',
                       'taints': [{'key': 'native.cpu/reserved', 'effect': 'NoSchedule'},
                                  {'key': 'bad key', 'value': 'a b', 'effect': 'Maybe'},
                                  {'key': '', 'effect': ''},
                                  {'key': 'x/y/z', 'effect': 'PreferNoSchedule'},
                                  {'key': 'Native.CPU/ok', 'value': '-x', 'effect': 'None'}]},
                      {'name': 'cpu1',
                       'taints': [{'key': 'k1', 'effect': 'None'},
                                  {'key': 'k2', 'effect': 'None'},
                                  {'key': 'k3', 'effect': 'None'},
                                  {'key': 'k4', 'effect': 'None'},
                                  {'key': 'k5', 'effect': 'None'},
                                  {'key': 'k6', 'effect': 'None'},
                                  {'key': 'k7', 'effect': 'None'},
                                  {'key': 'k8', 'effect': 'None'},
                                  {'key': 'k9', 'effect': 'None'},
                                  {'key': 'k10', 'effect': 'None'},
                                  {'key': 'k11', 'effect': 'None'},
                                  {'key': 'k12', 'effect': 'None'},
                                  {'key': 'k13', 'effect': 'None'},
                                  {'key': 'k14', 'effect': 'None'},
                                  {'key': 'k15', 'effect': 'None'},
                                  {'key': 'k16', 'effect': 'None'},
                                  {'key': 'k17', 'effect': 'None'}]}]}}

BAD_SLICE_CAUSES = [('spec.devices[0].taints[1].key',
  'FieldValueInvalid',
  'Invalid value: "bad key": name part must consist of alphanumeric characters, \'-\', \'_\' or \'.\', and '
  "must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
  "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"),
 ('spec.devices[0].taints[1].value',
  'FieldValueInvalid',
  'Invalid value: "a b": a valid label must be an empty string or consist of alphanumeric characters, \'-\', '
  "'_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
  "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"),
 ('spec.devices[0].taints[1].effect',
  'FieldValueNotSupported',
  'Unsupported value: "Maybe": supported values: "NoExecute", "NoSchedule", "None"'),
 ('spec.devices[0].taints[2].key', 'FieldValueInvalid', 'Invalid value: "": name part must be non-empty'),
 ('spec.devices[0].taints[2].key',
  'FieldValueInvalid',
  'Invalid value: "": name part must consist of alphanumeric characters, \'-\', \'_\' or \'.\', and must '
  "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
  "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"),
 ('spec.devices[0].taints[2].effect', 'FieldValueRequired', 'Required value'),
 ('spec.devices[0].taints[3].key',
  'FieldValueInvalid',
  'Invalid value: "x/y/z": a valid label key must consist of alphanumeric characters, \'-\', \'_\' or \'.\', '
  "and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
  "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix "
  "and '/' (e.g. 'example.com/MyName')"),
 ('spec.devices[0].taints[3].effect',
  'FieldValueNotSupported',
  'Unsupported value: "PreferNoSchedule": supported values: "NoExecute", "NoSchedule", "None"'),
 ('spec.devices[0].taints[4].key',
  'FieldValueInvalid',
  'Invalid value: "Native.CPU/ok": prefix part a lowercase RFC 1123 subdomain must consist of lower case '
  "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
  "'example.com', regex used for validation is "
  "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"),
 ('spec.devices[0].taints[4].value',
  'FieldValueInvalid',
  'Invalid value: "-x": a valid label must be an empty string or consist of alphanumeric characters, \'-\', '
  "'_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
  "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"),
 ('spec.devices[1].taints', 'FieldValueTooMany', 'Too many: 17: must have at most 16 items')]

BAD_CLAIM: dict[str, Any] = {'apiVersion': 'resource.k8s.io/v1',
 'kind': 'ResourceClaim',
 'metadata': {'name': 'c', 'namespace': 't1'},
 'spec': {'devices': {'requests': [{'name': 'r',
                                    'exactly': {'deviceClassName': 'native.cpu',
                                                'tolerations': [{'key': 'native.cpu/isolated',
                                                                 'operator': 'Exists',
                                                                 'effect': 'NoSchedule'},
                                                                {'key': 'a',
                                                                 'operator': 'Exists',
                                                                 'value': 'v'},
                                                                {'key': 'bad key', 'value': 'a b'},
                                                                {'operator': 'Sometimes'},
                                                                {'key': 'k',
                                                                 'operator': 'Equal',
                                                                 'value': 'v',
                                                                 'effect': 'Maybe'},
                                                                {'key': 'k',
                                                                 'effect': 'None',
                                                                 'tolerationSeconds': 5},
                                                                {'operator': ''},
                                                                {'key': 'k0', 'operator': 'Exists'},
                                                                {'key': 'k1', 'operator': 'Exists'},
                                                                {'key': 'k2', 'operator': 'Exists'},
                                                                {'key': 'k3', 'operator': 'Exists'},
                                                                {'key': 'k4', 'operator': 'Exists'},
                                                                {'key': 'k5', 'operator': 'Exists'},
                                                                {'key': 'k6', 'operator': 'Exists'},
                                                                {'key': 'k7', 'operator': 'Exists'},
                                                                {'key': 'k8', 'operator': 'Exists'},
                                                                {'key': 'k9', 'operator': 'Exists'},
                                                                {'key': 'k10', 'operator': 'Exists'},
                                                                {'key': 'k11', 'operator': 'Exists'}]}},
                                   {'name': 's',
                                    'firstAvailable': [{'name': 'a',
                                                        'deviceClassName': 'native.cpu',
                                                        'tolerations': [{'key': 'x',
                                                                         'operator': 'Exists',
                                                                         'value': 'y'}]}]}]}}}

BAD_CLAIM_CAUSES = [('spec.devices.requests[0].exactly.tolerations[1].value',
  'FieldValueInvalid',
  'Invalid value: "v": must be empty for operator `Exists`'),
 ('spec.devices.requests[0].exactly.tolerations[2].key',
  'FieldValueInvalid',
  'Invalid value: "bad key": name part must consist of alphanumeric characters, \'-\', \'_\' or \'.\', and '
  "must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
  "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"),
 ('spec.devices.requests[0].exactly.tolerations[2].value',
  'FieldValueInvalid',
  'Invalid value: "a b": a valid label must be an empty string or consist of alphanumeric characters, \'-\', '
  "'_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
  "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"),
 ('spec.devices.requests[0].exactly.tolerations[3].operator',
  'FieldValueNotSupported',
  'Unsupported value: "Sometimes": supported values: "Equal", "Exists"'),
 ('spec.devices.requests[0].exactly.tolerations[4].effect',
  'FieldValueNotSupported',
  'Unsupported value: "Maybe": supported values: "NoExecute", "NoSchedule", "None"'),
 ('spec.devices.requests[1].firstAvailable[0].tolerations[0].value',
  'FieldValueInvalid',
  'Invalid value: "y": must be empty for operator `Exists`')]


def _causes(exc: ApiError) -> list[tuple[str, str, str]]:
    return [(c.field, c.reason, c.message) for c in exc.causes]


def test_taint_errors_are_the_real_servers() -> None:
    with pytest.raises(ApiError) as err:
        Store().create(SLICES, None, BAD_SLICE, dry_run=True)
    assert err.value.code == 422
    assert _causes(err.value) == BAD_SLICE_CAUSES


def test_toleration_errors_are_the_real_servers() -> None:
    with pytest.raises(ApiError) as err:
        Store().create(CLAIMS, "t1", BAD_CLAIM, dry_run=True)
    assert err.value.code == 422
    assert _causes(err.value) == BAD_CLAIM_CAUSES


def _slice(taints: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "n1-t"},
        "spec": {
            "driver": "native.cpu",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "cpu0", "taints": taints}],
        },
    }


def test_time_added_is_defaulted_and_stored_as_utc_seconds() -> None:
    # as the real server stored the same taints: a missing time is the write's, a given one in UTC
    stored = Store().create(
        SLICES,
        None,
        _slice(
            [
                {"key": "native.cpu/reserved", "effect": "NoSchedule"},
                {"key": "native.cpu/offline", "effect": "NoExecute", "timeAdded": "2026-12-04T10:00:00.123+02:00"},
            ]
        ),
    )
    first, second = stored["spec"]["devices"][0]["taints"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", first["timeAdded"])
    assert second["timeAdded"] == "2026-12-04T08:00:00Z"


def test_an_undecodable_time_added_is_a_bad_request_in_gos_words() -> None:
    with pytest.raises(ApiError) as err:
        Store().create(SLICES, None, _slice([{"key": "k", "effect": "None", "timeAdded": "yesterday"}]), dry_run=True)
    assert err.value.code == 400
    assert str(err.value.message) == (
        'ResourceSlice in version "v1" cannot be handled as a ResourceSlice: parsing time "yesterday" as '
        '"2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006"'
    )


def test_toleration_operator_defaults_to_equal_and_17_tolerations_pass() -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "t1"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "r",
                        "exactly": {
                            "deviceClassName": "native.cpu",
                            "tolerations": [{"key": "native.cpu/isolated", "effect": "NoSchedule"}]
                            + [{"key": f"k{i}", "operator": "Exists"} for i in range(16)],
                        },
                    }
                ]
            }
        },
    }
    stored = Store().create(CLAIMS, "t1", claim, dry_run=True)
    tolerations = stored["spec"]["devices"]["requests"][0]["exactly"]["tolerations"]
    assert tolerations[0] == {"key": "native.cpu/isolated", "effect": "NoSchedule", "operator": "Equal"}
    assert len(tolerations) == 17  # documented as at most 16, not checked by a 1.36 server
