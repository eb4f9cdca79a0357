"""Runs `python -m llama_cpp.server` with one fix to how it turns a named tool's JSON schema into a
grammar: a subschema holding only annotations (close_ticket's `result` is a bare description: any
JSON value) means any value in JSON Schema, but llama-cpp-python's converter rejects it and falls
back to free-form JSON, which a tiny model fills with anything but `{"result": ...}`. Here such a
subschema is read as any value but null (close_ticket refuses a null result, and a model that sees
no tool results would repeat it), so the reply is constrained to the tool's arguments.
"""

import json
import runpy

from llama_cpp import llama_grammar

ANNOTATIONS = {"description", "title", "examples", "default", "$comment", "deprecated", "readOnly", "writeOnly"}
# Keywords whose value is a map of names to subschemas, or data rather than a schema.
SCHEMA_MAPS = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
DATA = {"const", "enum", "examples", "default", "required"}
ANY_BUT_NULL = {"type": ["string", "number", "boolean", "object", "array"]}


def any_value_for_annotations(schema):
    if isinstance(schema, list):
        return [any_value_for_annotations(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if schema and set(schema) <= ANNOTATIONS:
        return dict(ANY_BUT_NULL)
    out = {}
    for key, value in schema.items():
        if key in SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: any_value_for_annotations(sub) for name, sub in value.items()}
        elif key in DATA or key in ANNOTATIONS:
            out[key] = value
        else:
            out[key] = any_value_for_annotations(value)
    return out


_from_json_schema = llama_grammar.LlamaGrammar.from_json_schema


def from_json_schema(cls, json_schema, verbose=True):
    schema = any_value_for_annotations(json.loads(json_schema))
    return _from_json_schema(json.dumps(schema), verbose=verbose)


llama_grammar.LlamaGrammar.from_json_schema = classmethod(from_json_schema)

if __name__ == "__main__":
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
