#!/usr/bin/env python3
"""Writes agentdesk/types.py from the OpenAPI document: a dataclass per object schema (with a
`from_json` that builds nested ones), a Literal per string enum, and the event kinds.

    python3 scripts/generate_types.py [OPENAPI_JSON] [OUT_PY]

Standard library only; the output depends on nothing but the document, so a check can
regenerate it elsewhere and compare.
"""
from __future__ import annotations

import json
import keyword
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_DOC = HERE.parents[2] / "openapi" / "openapi.json"
DEFAULT_OUT = HERE.parent / "src" / "agentdesk" / "types.py"

HEADER = '''"""Types of the agentdesk API, generated from openapi/openapi.json by
scripts/generate_types.py. Do not edit by hand: run clients/generate.sh."""
# fmt: off
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional


def _list(build: Any, value: Any) -> Any:
    return None if value is None else [build(v) for v in value]


def _opt(build: Any, value: Any) -> Any:
    return None if value is None else build(value)

'''


def ref_name(schema: dict[str, Any]) -> str | None:
    ref = schema.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


class Gen:
    def __init__(self, schemas: dict[str, Any]) -> None:
        self.schemas = schemas

    def is_class(self, name: str) -> bool:
        s = self.schemas[name]
        return s.get("type") == "object" and "properties" in s

    def is_enum(self, name: str) -> bool:
        s = self.schemas[name]
        return s.get("type") == "string" and "enum" in s

    def nullable_ref(self, schema: dict[str, Any]) -> tuple[str | None, bool]:
        """The schema a property refers to, and whether null is allowed beside it."""
        name = ref_name(schema)
        if name:
            return name, False
        for key in ("oneOf", "anyOf"):
            options = schema.get(key)
            if isinstance(options, list) and len(options) == 2:
                refs = [ref_name(o) for o in options]
                nulls = [o.get("type") == "null" for o in options]
                if any(nulls) and any(refs):
                    return next(r for r in refs if r), True
        return None, False

    def annotation(self, schema: dict[str, Any]) -> str:
        name, nullable = self.nullable_ref(schema)
        if name:
            inner = name if (self.is_class(name) or self.is_enum(name)) else "Any"
            return f"Optional[{inner}]" if nullable else inner
        types = schema.get("type")
        if isinstance(types, str):
            types = [types]
        if not types:
            return "Any"
        nullable = "null" in types
        rest = [t for t in types if t != "null"]
        if len(rest) != 1:
            return "Any"
        t = rest[0]
        if t == "string":
            base = "str"
            if "enum" in schema:
                base = "Literal[" + ", ".join(json.dumps(e) for e in schema["enum"]) + "]"
        elif t == "integer":
            base = "int"
        elif t == "number":
            base = "float"
        elif t == "boolean":
            base = "bool"
        elif t == "array":
            base = f"List[{self.annotation(schema.get('items', {}))}]"
        elif t == "object":
            extra = schema.get("additionalProperties")
            value = self.annotation(extra) if isinstance(extra, dict) else "Any"
            base = f"Dict[str, {value}]"
        else:
            base = "Any"
        return f"Optional[{base}]" if nullable else base

    def builder(self, schema: dict[str, Any], expr: str) -> str:
        """An expression turning the JSON value `expr` into the annotated Python value."""
        name, nullable = self.nullable_ref(schema)
        if name and self.is_class(name):
            return f"_opt({name}.from_json, {expr})" if nullable or expr.startswith("d.get") else f"{name}.from_json({expr})"
        types = schema.get("type")
        if types == "array" or (isinstance(types, list) and "array" in types):
            item_ref, _ = self.nullable_ref(schema.get("items", {}))
            if item_ref and self.is_class(item_ref):
                return f"_list({item_ref}.from_json, {expr})"
        return expr

    def dataclass(self, name: str) -> str:
        s = self.schemas[name]
        required = set(s.get("required", []))
        props: dict[str, Any] = s["properties"]
        lines = ["@dataclass", f"class {name}:"]
        doc = s.get("description")
        if doc:
            lines.append(f'    """{doc.strip()}"""'.replace("\\", "\\\\"))
            lines.append("")
        # Required fields first: dataclass fields with defaults must follow those without.
        ordered = [p for p in props if p in required] + [p for p in props if p not in required]
        builds = []
        for prop in ordered:
            # `raw` is the attribute holding the whole object (below): a property of that name too
            # (A2A's Part) takes a trailing underscore, as a Python keyword does.
            attr = prop + "_" if keyword.iskeyword(prop) or prop == "raw" else prop
            ann = self.annotation(props[prop])
            if prop in required:
                lines.append(f"    {attr}: {ann}")
                builds.append(f"            {attr}={self.builder(props[prop], f'd[{prop!r}]')},")
            else:
                if not ann.startswith("Optional[") and ann != "Any":
                    ann = f"Optional[{ann}]"
                lines.append(f"    {attr}: {ann} = None")
                builds.append(f"            {attr}={self.builder(props[prop], f'd.get({prop!r})')},")
        lines.append("    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)")
        lines.append('    """The JSON object as received, fields this version does not know included."""')
        lines.append("")
        lines.append("    @classmethod")
        lines.append(f"    def from_json(cls, d: Dict[str, Any]) -> {name}:")
        lines.append("        return cls(")
        lines.extend(builds)
        lines.append("            raw=d,")
        lines.append("        )")
        return "\n".join(lines)

    def render(self) -> str:
        out = [HEADER]
        for name in sorted(self.schemas):
            if self.is_enum(name):
                values = ", ".join(json.dumps(e) for e in self.schemas[name]["enum"])
                out.append(f"{name} = Literal[{values}]\n")
        kinds = []
        for option in self.schemas.get("EventData", {}).get("oneOf", []):
            kinds.extend(option.get("properties", {}).get("kind", {}).get("enum", []))
        out.append("EventKind = Literal[" + ", ".join(json.dumps(k) for k in kinds) + "]")
        out.append('"""Every event kind the document names (a desk may send newer ones)."""\n')
        out.append("EVENT_KINDS = (" + "".join(f"\n    {json.dumps(k)}," for k in kinds) + "\n)\n")
        for name in sorted(self.schemas):
            if self.is_class(name):
                out.append("\n" + self.dataclass(name) + "\n")
        return "\n".join(out)


def main() -> None:
    doc_path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DOC
    out_path = Path(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_OUT
    doc = json.loads(doc_path.read_text())
    out_path.write_text(Gen(doc["components"]["schemas"]).render())


if __name__ == "__main__":
    main()
