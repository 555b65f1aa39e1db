"""Validates deploy/kubernetes.yaml offline against published schemas (run by `cargo xtask deploy-check`).

- Deployment and Service: the Kubernetes JSON Schemas that the `kubernetes-validate` package
  bundles, strict (unknown fields refused), for the oldest and newest Kubernetes it knows of
  those this file names.
- InferencePool: deploy/schemas/inferencepool-v1.json (see the licence file beside it).
- Containerfile: hadolint (the binary named by $HADOLINT), warnings and errors both failing.

Then the same validators must refuse broken copies of each object, so a validator that accepts
everything cannot pass. Exit status 0 only when every object validates and every broken copy is
refused.
"""

import copy
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import jsonschema
import yaml
from kubernetes_validate import utils

HERE = pathlib.Path(__file__).resolve().parent
KUBERNETES = ["1.30", "1.37"]


def errors(resource, version):
    """The validation errors of one resource, as strings ([] when it is valid)."""
    kind = resource.get("kind")
    if kind == "InferencePool":
        schema = json.loads((HERE / "schemas" / "inferencepool-v1.json").read_text())
        validator = jsonschema.Draft202012Validator(schema)
        return [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(resource)]
    try:
        utils.validate(resource, version, strict=True)
        return []
    except utils.ValidationError as e:
        return [f"{'.'.join(map(str, e.path))}: {e.message}"]
    except utils.SchemaNotFoundError as e:
        # An unknown kind is a failure here, never a skip.
        return [e.message]


def broken(resource):
    """Copies of `resource` that a schema must refuse, with what is wrong with each."""
    kind = resource["kind"]
    out = []
    if kind == "Deployment":
        c = copy.deepcopy(resource)
        c["spec"]["replica"] = c["spec"].pop("replicas")
        out.append(("misspelt spec.replicas", c))
        c = copy.deepcopy(resource)
        c["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["periodSeconds"] = "5"
        out.append(("a probe period as a string", c))
    elif kind == "Service":
        c = copy.deepcopy(resource)
        c["spec"]["ports"][0]["port"] = "eighty"
        out.append(("a port as a word", c))
    elif kind == "InferencePool":
        c = copy.deepcopy(resource)
        del c["spec"]["endpointPickerRef"]
        out.append(("no endpointPickerRef", c))
        c = copy.deepcopy(resource)
        c["spec"]["targetPorts"][0]["number"] = 70000
        out.append(("a target port above 65535", c))
        c = copy.deepcopy(resource)
        c["spec"]["endpointPickerRef"]["failureMode"] = "FailSometimes"
        out.append(("an unknown failureMode", c))
        c = copy.deepcopy(resource)
        c["spec"]["targetPortNumber"] = 8080
        out.append(("the v1alpha2 field targetPortNumber", c))
    return out


def hadolint(path):
    """hadolint's findings on `path` at warning level or above (empty when it passes)."""
    run = subprocess.run(
        [os.environ["HADOLINT"], "--no-color", "--failure-threshold", "warning", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode == 0:
        return ""
    return (run.stdout + run.stderr).strip() or f"exit status {run.returncode}"


def lint_containerfile():
    """Lints the Containerfile, then a broken copy that must fail: (failures, checks)."""
    if not os.environ.get("HADOLINT"):
        print("FAIL Containerfile: HADOLINT is not set (cargo xtask deploy-check sets it)")
        return 1, 1
    path = HERE / "Containerfile"
    failures = 0
    found = hadolint(path)
    if found:
        failures += 1
        print(f"FAIL {path.name} (hadolint): {found}")
    else:
        print(f"ok   {path.name} (hadolint)")
    # The entry point in shell form, not JSON: signals would reach a shell, not `nextok serve`,
    # which would then never drain on SIGTERM.
    text = path.read_text()
    entry = next(line for line in text.splitlines() if line.startswith("ENTRYPOINT"))
    broken = text.replace(entry, "ENTRYPOINT nextok serve --host 0.0.0.0 --port 8080")
    with tempfile.TemporaryDirectory() as tmp:
        copy_path = pathlib.Path(tmp) / "Containerfile"
        copy_path.write_text(broken)
        if hadolint(copy_path):
            print(f"ok   {path.name} with a shell-form ENTRYPOINT is refused (hadolint)")
        else:
            failures += 1
            print(f"FAIL {path.name} with a shell-form ENTRYPOINT was accepted (hadolint)")
    return failures, 2


def main():
    path = HERE / "kubernetes.yaml"
    resources = [r for r in yaml.safe_load_all(path.read_text()) if r]
    kinds = sorted(r["kind"] for r in resources)
    if kinds != ["Deployment", "InferencePool", "Service"]:
        print(f"FAIL {path.name}: expected a Deployment, a Service and an InferencePool, found {kinds}")
        return 1
    failures = 0
    checks = 0
    for version in KUBERNETES:
        for r in resources:
            name = f"{r['kind']}/{r['metadata']['name']}"
            found = errors(r, version)
            checks += 1
            if found:
                failures += 1
                print(f"FAIL {name} (Kubernetes {version}): {'; '.join(found)}")
            else:
                print(f"ok   {name} (Kubernetes {version})")
            for what, c in broken(r):
                checks += 1
                if errors(c, version):
                    print(f"ok   {name} with {what} is refused (Kubernetes {version})")
                else:
                    failures += 1
                    print(f"FAIL {name} with {what} was accepted (Kubernetes {version})")
    lint_failures, lint_checks = lint_containerfile()
    failures += lint_failures
    checks += lint_checks
    if failures:
        print(f"deploy check: {failures} of {checks} checks failed")
    else:
        print(f"deploy check: all {checks} checks are as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
