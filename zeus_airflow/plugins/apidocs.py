"""The API reference page's content, read from the app's OpenAPI document.

FastAPI's own ``/docs`` loads Swagger UI from a CDN, which the machines this runs on often
cannot reach; this page is plain HTML from the same document, and ``/zeus/openapi.json``
serves the document itself for tools.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    description: str
    required: bool


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str
    summary: str
    description: str
    parameters: tuple[Field, ...]
    response: str
    """Name of the response model."""


@dataclass(frozen=True)
class Model:
    name: str
    description: str
    fields: tuple[Field, ...]


def type_name(schema: dict[str, Any]) -> str:
    """A JSON schema as a short type, e.g. ``integer | null`` or ``array of RunOut``."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " | ".join(type_name(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"array of {type_name(schema.get('items', {}))}"
    if "enum" in schema:
        return " | ".join(f'"{v}"' for v in schema["enum"])
    kind = str(schema.get("type", "any"))
    return f"{kind} ({schema['format']})" if "format" in schema else kind


def endpoints(spec: dict[str, Any]) -> list[Endpoint]:
    found = []
    for path, methods in spec.get("paths", {}).items():
        for method, op in methods.items():
            ok = op.get("responses", {}).get("200", {})
            schema = ok.get("content", {}).get("application/json", {}).get("schema", {})
            found.append(
                Endpoint(
                    method.upper(),
                    path,
                    op.get("summary", ""),
                    op.get("description", ""),
                    tuple(
                        Field(
                            p["name"],
                            f"{p['in']}, {type_name(p.get('schema', {}))}",
                            p.get("description", ""),
                            bool(p.get("required")),
                        )
                        for p in op.get("parameters", [])
                    ),
                    type_name(schema) if schema else "",
                )
            )
    return found


def models(spec: dict[str, Any]) -> list[Model]:
    schemas = spec.get("components", {}).get("schemas", {})
    return [
        Model(
            name,
            s.get("description", ""),
            tuple(
                Field(field, type_name(f), f.get("description", ""), field in s.get("required", []))
                for field, f in s.get("properties", {}).items()
            ),
        )
        for name, s in sorted(schemas.items())
        if not name.startswith(("HTTP", "Validation"))
    ]
