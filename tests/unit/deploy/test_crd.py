"""Structural checks of the ScheduledJob CustomResourceDefinition (no API server needed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cronlease.core.specs.spec import CatchUp, ConcurrencyPolicy

CRD_PATH = Path(__file__).resolve().parents[3] / "crds" / "cronlease.io_scheduledjobs.yaml"


def load(path: Path) -> Any:
    # The C loader: the pure-Python one takes seconds over the CRD's generated JobSpecs.
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    return load(CRD_PATH)


@pytest.fixture(scope="module")
def version(crd: dict[str, Any]) -> dict[str, Any]:
    (only,) = crd["spec"]["versions"]
    return only


@pytest.fixture(scope="module")
def schema(version: dict[str, Any]) -> dict[str, Any]:
    return version["schema"]["openAPIV3Schema"]


def walk(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property schema below `node`, with its path, through items and maps too, but not
    into a JobSpec: that one is Kubernetes' own (hack/crdgen.py; test_generated_job_specs)."""
    if path.endswith("jobTemplate.spec"):
        return
    for name, prop in node.get("properties", {}).items():
        yield f"{path}.{name}", prop
        yield from walk(prop, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from walk(node[key], f"{path}[]")


def test_names_and_scope(crd: dict[str, Any]) -> None:
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == "scheduledjobs.cronlease.io"
    assert crd["spec"]["group"] == "cronlease.io"
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"] == {
        "kind": "ScheduledJob",
        "listKind": "ScheduledJobList",
        "plural": "scheduledjobs",
        "singular": "scheduledjob",
        "shortNames": ["sj"],
        "categories": ["cronlease", "all"],
    }


def test_version_and_status_subresource(version: dict[str, Any]) -> None:
    assert version["name"] == "v1alpha1"
    assert version["served"] is True
    assert version["storage"] is True
    assert version["subresources"] == {"status": {}}


def test_printer_columns(version: dict[str, Any]) -> None:
    columns = [
        (c["name"].upper(), c["jsonPath"], c["type"], c.get("priority", 0))
        for c in version["additionalPrinterColumns"]
    ]
    assert columns == [
        # Whichever of the three is set: a list for schedules, never an empty column.
        ("SCHEDULE", ".spec['schedule','schedules','runAt']", "string", 0),
        ("TIMEZONE", ".spec.timeZone", "string", 0),
        # Ready's reason: Scheduling, Suspended, Paused, InvalidSpec or Completed.
        ("STATUS", '.status.conditions[?(@.type=="Ready")].reason', "string", 0),
        ("ACTIVE", ".status.activeCount", "integer", 0),
        ("LAST SCHEDULE", ".status.lastScheduleTime", "date", 0),
        # Future instants: a date column would print "<invalid>".
        ("NEXT", ".status.nextScheduleTime", "string", 0),
        ("AGE", ".metadata.creationTimestamp", "date", 0),
        ("LAST SUCCESS", ".status.lastSuccessfulTime", "date", 1),
        ("READY", '.status.conditions[?(@.type=="Ready")].status', "string", 1),
        ("SUSPEND", ".spec.suspend", "boolean", 1),
    ]


def test_every_property_is_described(schema: dict[str, Any]) -> None:
    assert schema.get("description")
    # The API server forbids a description on the root metadata (kubectl shows ObjectMeta's).
    missing = [p for p, s in walk(schema, "") if not s.get("description") and p != ".metadata"]
    assert missing == []


def test_required_fields(schema: dict[str, Any]) -> None:
    spec = schema["properties"]["spec"]
    assert schema["required"] == ["spec"]
    assert "required" not in spec  # jobTemplate or steps, a CEL rule
    assert {
        "rule": "has(self.jobTemplate) != has(self.steps)",
        "message": "spec: set exactly one of jobTemplate and steps",
    } in spec["x-kubernetes-validations"]
    assert spec["properties"]["jobTemplate"]["required"] == ["spec"]
    job_spec = spec["properties"]["jobTemplate"]["properties"]["spec"]
    assert job_spec["required"] == ["template"]  # Kubernetes' own JobSpec


def test_defaults_and_bounds(schema: dict[str, Any]) -> None:
    spec = schema["properties"]["spec"]["properties"]
    defaults = {name: prop["default"] for name, prop in spec.items() if "default" in prop}
    assert defaults == {
        "timeZone": "UTC",
        "concurrencyPolicy": "Allow",
        "suspend": False,
        "successfulJobsHistoryLimit": 3,
        "failedJobsHistoryLimit": 1,
    }
    assert spec["concurrencyPolicy"]["enum"] == [policy.value for policy in ConcurrencyPolicy]
    assert spec["catchUp"]["enum"] == [catch_up.value for catch_up in CatchUp]
    assert spec["runAt"]["format"] == "date-time"
    for path, prop in walk(schema, ""):
        if prop.get("type") == "integer" and path != ".spec.priority":
            assert prop.get("minimum") in (0, 1), path  # bounded below, never negative
    assert (spec["priority"]["minimum"], spec["priority"]["maximum"]) == (-1_000_000, 1_000_000)
    assert spec["startingDeadlineSeconds"]["maximum"] == 31536000
    assert spec["successfulJobsHistoryLimit"]["maximum"] == 100
    assert spec["failedJobsHistoryLimit"]["maximum"] == 100


def test_cel_rules(schema: dict[str, Any]) -> None:
    spec = schema["properties"]["spec"]
    assert {
        "rule": "self.metadata.name.size() <= 52",
        "message": "metadata.name: must be no more than 52 characters "
        "(Job names append an 11-character suffix)",
        "fieldPath": ".metadata.name",
    } in schema["x-kubernetes-validations"]
    assert {
        "rule": (
            "[has(self.schedule), has(self.schedules), has(self.runAt)].filter(x, x).size() == 1"
        ),
        "message": "spec: set exactly one of schedule, schedules and runAt",
    } in spec["x-kubernetes-validations"]
    nodes = [("", schema), *walk(schema, "")]
    for path, node in nodes:
        for rule in node.get("x-kubernetes-validations", []):
            # Every rule explains itself on one line, naming the field it is about.
            assert "\n" not in rule["message"], path
            named = path.rsplit(".", 1)[-1] + rule.get("fieldPath", "")
            assert rule["message"].split(":")[0].endswith(named.lstrip(".")), path
            # A bounded string keeps the CEL cost estimate small.
            if node.get("type") == "string":
                assert node.get("maxLength"), path


def test_status(schema: dict[str, Any]) -> None:
    status = schema["properties"]["status"]["properties"]
    conditions = status["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert conditions["items"]["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert status["active"]["x-kubernetes-list-type"] == "atomic"
    assert status["recentRuns"]["maxItems"] == 10
    run = status["recentRuns"]["items"]["properties"]
    assert run["trigger"]["enum"] == ["Schedule", "Manual", "Replay", "Backfill"]
    assert run["result"]["enum"] == [
        "Active",
        "Succeeded",
        "Failed",
        "Deleted",
        "Retrying",
        "DeadLettered",
        "Replayed",
    ]
    assert status["slotsSkipped"]["additionalProperties"]["format"] == "int64"
    for name in ("lastScheduleTime", "lastSuccessfulTime", "nextScheduleTime", "processedUntil"):
        assert status[name]["format"] == "date-time"


def test_every_trigger_and_result_the_operator_writes_is_in_the_schema(
    schema: dict[str, Any],
) -> None:
    """A value the schema does not list makes the API server refuse the whole status write."""
    from cronlease.core.decide.history import RESULTS
    from cronlease.core.names.naming import REQUEST_TRIGGERS, TRIGGER_MANUAL, TRIGGER_SCHEDULE

    entry = schema["properties"]["status"]["properties"]["recentRuns"]["items"]["properties"]
    assert {TRIGGER_SCHEDULE, TRIGGER_MANUAL, *REQUEST_TRIGGERS} == set(entry["trigger"]["enum"])
    assert set(RESULTS.values()) | {"Deleted"} == set(entry["result"]["enum"])


# --- the generated JobSpecs (hack/crdgen.py) -----------------------------------------------------

REPO = CRD_PATH.parents[1]
JOB_SPECS = {
    "jobTemplate": ("jobTemplate",),
    "steps": ("steps", "items", "jobTemplate"),
    "compensate": ("steps", "items", "compensate", "jobTemplate"),
}


def job_spec(schema: dict[str, Any], where: str) -> dict[str, Any]:
    node = schema["properties"]["spec"]
    for key in JOB_SPECS[where]:
        node = node[key] if key == "items" else node["properties"][key]
    spec: dict[str, Any] = node["properties"]["spec"]
    return spec


def nodes(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for name, prop in node.get("properties", {}).items():
            yield from nodes(prop, f"{path}.{name}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                yield from nodes(node[key], f"{path}[]")


def test_the_crds_are_what_the_generator_writes() -> None:
    """crds/ (and the chart's copies, test_chart.py) hold exactly what `make crds` writes from
    the OpenAPI of the control plane's Kubernetes: no JobSpec field is written by hand."""
    import crdgen

    openapi = crdgen.openapi_path()
    if not openapi.exists():
        pytest.skip(f"{openapi} is missing: `make controlplane` downloads it")
    definitions = crdgen.load_definitions(openapi)
    for path in sorted((REPO / "crds").glob("*.yaml")):
        text = path.read_text()
        assert crdgen.generate(text, definitions) == text, f"{path.name} is stale: make crds"
    text = CRD_PATH.read_text()
    assert text.count("# >>> generated by hack/crdgen.py from io.k8s.api.batch.v1.JobSpec") == 3


@pytest.mark.parametrize("where", sorted(JOB_SPECS))
def test_generated_job_specs(schema: dict[str, Any], where: str) -> None:
    spec = job_spec(schema, where)
    assert spec["type"] == "object"
    assert spec["required"] == ["template"]
    pod = spec["properties"]["template"]["properties"]["spec"]
    container = pod["properties"]["containers"]["items"]
    assert container["required"] == ["name"]
    assert pod["properties"]["containers"]["x-kubernetes-list-map-keys"] == ["name"]
    assert container["properties"]["image"]["type"] == "string"
    ports = container["properties"]["ports"]
    assert ports["items"]["properties"]["protocol"]["default"] == "TCP"  # a list-map key
    cpu = container["properties"]["resources"]["properties"]["limits"]["additionalProperties"]
    assert cpu["x-kubernetes-int-or-string"] is True
    assert "pattern" in cpu
    kinds: dict[str, list[str]] = {"preserve": [], "default": [], "untyped": []}
    for path, node in nodes(spec):
        assert not {"$ref", "allOf", "oneOf", "readOnly", "x-kubernetes-patch-strategy"} & set(node)
        if node.get("x-kubernetes-preserve-unknown-fields"):
            kinds["preserve"].append(path)
        if "default" in node:
            kinds["default"].append(path)
        if "type" not in node and not node.get("x-kubernetes-int-or-string"):
            kinds["untyped"].append(path)
    # Nothing is open but a managed field's set (FieldsV1), so any other unknown field is refused.
    assert kinds["preserve"] == [
        ".template.metadata.managedFields[].fieldsV1",
        ".template.spec.volumes[].ephemeral.volumeClaimTemplate.metadata.managedFields[].fieldsV1",
    ]
    assert sorted(kinds["default"]) == [
        ".template.spec.containers[].ports[].protocol",
        ".template.spec.ephemeralContainers[].ports[].protocol",
        ".template.spec.imagePullSecrets[].name",
        ".template.spec.initContainers[].ports[].protocol",
    ]
    assert kinds["untyped"] == []
    described = [path for path, node in nodes(spec) if path and "description" in node]
    if where == "jobTemplate":  # `kubectl explain` reads it there; the steps' repeat it bare
        assert len(described) > 500
        assert ".template.spec.containers[].image" in described
    else:
        assert described == []


def test_the_crd_fits_in_etcd_with_room_to_spare() -> None:
    """The stored CRD (JSON) stays well below etcd's 1.5 MiB request limit. It is far above the
    262144 bytes of kubectl's last-applied annotation: install with `kubectl apply
    --server-side` or `kubectl create` (Helm's own apply keeps no such annotation)."""
    import json

    size = len(json.dumps(load(CRD_PATH), separators=(",", ":")))
    assert 262_144 < size < 800_000, size
