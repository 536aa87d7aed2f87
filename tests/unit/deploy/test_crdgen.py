"""hack/crdgen.py: Kubernetes' OpenAPI v3 turned into a structural CRD schema, on small documents
made here (tests/unit/deploy/test_crd.py checks the real JobSpec in crds/)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

import crdgen
from crdgen import GeneratorError, generate, schema_of

REF = "#/components/schemas/"


def ref(name: str) -> dict[str, str]:
    return {"$ref": REF + name}


DEFINITIONS: dict[str, Any] = {
    "Spec": {
        "description": "the spec",
        "type": "object",
        "required": ["items"],
        "properties": {
            "count": {
                "description": "how many",
                "type": "integer",
                "format": "int32",
                "default": 0,
            },
            "port": {"description": "a port", "allOf": [ref("IntOrString")]},
            "memory": {"description": "some bytes", "allOf": [ref("Quantity")], "default": {}},
            "items": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name", "protocol"],
                "x-kubernetes-patch-merge-key": "name",
                "x-kubernetes-patch-strategy": "merge",
                "items": {"default": {}, "allOf": [ref("Item")]},
            },
            "labels": {"type": "object", "additionalProperties": {"type": "string", "default": ""}},
            "fields": ref("FieldsV1"),
            "marker": {"description": "an empty struct", "allOf": [ref("Empty")]},
        },
    },
    "Item": {
        "description": "an item",
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "default": ""},
            "protocol": {"type": "string", "default": "TCP"},
        },
    },
    "IntOrString": {"format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]},
    "Quantity": {"description": "a quantity", "oneOf": [{"type": "string"}, {"type": "number"}]},
    "FieldsV1": {"description": "free-form", "type": "object"},
    "Empty": {"description": "nothing", "type": "object"},
    "Loop": {"type": "object", "properties": {"again": ref("Loop")}},
    "Odd": {"type": "object", "x-kubernetes-something": True},
}
# The converter knows the real names of the free-form and quantity types.
DEFINITIONS[crdgen.QUANTITY] = DEFINITIONS.pop("Quantity")
DEFINITIONS["Spec"]["properties"]["memory"]["allOf"] = [ref(crdgen.QUANTITY)]
FIELDS_V1 = "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1"
DEFINITIONS[FIELDS_V1] = DEFINITIONS.pop("FieldsV1")
DEFINITIONS["Spec"]["properties"]["fields"] = ref(FIELDS_V1)


def test_a_definition_becomes_a_structural_schema() -> None:
    schema = schema_of(DEFINITIONS, "Spec", descriptions=True)
    assert "description" not in schema  # the field's own, hand-written one stands beside it
    assert schema["type"] == "object"
    assert schema["required"] == ["items"]
    props = schema["properties"]
    # Defaults are Go's zero values: dropped, so that a missing field is refused, not filled.
    assert props["count"] == {"description": "how many", "type": "integer", "format": "int32"}
    assert props["port"] == {
        "description": "a port",
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    }
    assert props["memory"]["description"] == "some bytes"  # the field's, not the type's
    assert props["memory"]["x-kubernetes-int-or-string"] is True
    assert props["memory"]["pattern"] == crdgen.QUANTITY_PATTERN
    items = props["items"]
    assert "x-kubernetes-patch-merge-key" not in items
    assert "x-kubernetes-patch-strategy" not in items
    assert items["x-kubernetes-list-map-keys"] == ["name", "protocol"]
    # A list-map key that is not required keeps its default: the API server wants one.
    assert items["items"]["properties"]["protocol"] == {"type": "string", "default": "TCP"}
    assert items["items"]["properties"]["name"] == {"type": "string"}
    assert props["labels"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert props["fields"] == {
        "description": "free-form",
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    assert props["marker"] == {"description": "an empty struct", "type": "object"}


def test_without_descriptions_none_is_left() -> None:
    text = yaml.safe_dump(schema_of(DEFINITIONS, "Spec", descriptions=False))
    assert "description" not in text


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("Loop", "recursive definition Loop"),
        ("Odd", "unknown keys ['x-kubernetes-something']"),
        ("Missing", "no definition Missing"),
    ],
)
def test_what_it_cannot_express_stops_the_generator(name: str, error: str) -> None:
    with pytest.raises(GeneratorError, match=re.escape(error)):
        schema_of(DEFINITIONS, name, descriptions=True)


@pytest.mark.parametrize(
    ("quantity", "valid"),
    [
        ("500m", True),
        ("1Gi", True),
        ("1.5", True),
        (".5", True),
        ("+2", True),
        ("-1e3", True),
        ("12E", True),
        ("1E6", True),
        ("1 Gi", False),
        ("Gi", False),
        ("1GB", False),
        ("1.2.3", False),
        ("", False),
    ],
)
def test_the_quantity_pattern_follows_its_grammar(quantity: str, valid: bool) -> None:
    assert bool(re.match(crdgen.QUANTITY_PATTERN, quantity)) is valid


MANIFEST = """\
spec:
  versions:
    - schema:
        openAPIV3Schema:
          properties:
            spec:
              description: hand-written
              # >>> generated by hack/crdgen.py from Item (descriptions): do not edit
              stale: true
              # <<< generated
            other:
              type: string
"""


def test_a_region_is_written_anew_and_the_rest_left_as_it_is() -> None:
    written = generate(MANIFEST, DEFINITIONS)
    assert "stale" not in written
    assert written.startswith(MANIFEST.split("              stale")[0])
    assert written.endswith(
        "              # <<< generated\n            other:\n              type: string\n"
    )
    loaded = yaml.safe_load(written)
    spec = loaded["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["description"] == "hand-written"
    assert spec["required"] == ["name"]
    assert spec["properties"]["protocol"] == {"type": "string"}  # not a list-map key here
    assert generate(written, DEFINITIONS) == written  # idempotent


def test_an_unclosed_region_is_an_error() -> None:
    with pytest.raises(GeneratorError, match="no '# <<< generated' after it"):
        generate(MANIFEST.replace("# <<< generated", "# <<<"), DEFINITIONS)
