#!/usr/bin/env python3
"""Renders the Kustomize base (deploy/kubernetes/kustomization.yaml) the way
`kubectl kustomize` does for what this base uses — its resources in order,
`images:` tags applied — without kubectl, and prints the manifests as YAML
(`render.py`) or as one JSON array (`render.py --json`), or the facts the
tests check (`render.py --facts`, JSON): the
collector container's mounts, args and config, the audience of its
projected token, the correlator's args, init container args and config,
whether the PrometheusRule carries deploy/prometheus's rule groups.

`render.py --sync-rules` rewrites monitoring.yaml's PrometheusRule from
deploy/prometheus/faultline-rules.yaml (the tests check they are equal).

Needs PyYAML (scripts/setup.sh installs it with kubernetes-validate in the
deploy venv).
"""
import json
import pathlib
import sys

import yaml

HERE = pathlib.Path(__file__).resolve().parent


def render():
    k = yaml.safe_load((HERE / "kustomization.yaml").read_text())
    tags = {i["name"]: i.get("newTag") for i in k.get("images", [])}
    docs = []
    for r in k["resources"]:
        docs.extend(resources(HERE / r))
    for d in docs:
        spec = d.get("spec", {}).get("template", {}).get("spec", {})
        for c in spec.get("containers", []):
            name, _, tag = c["image"].rpartition(":")
            if name in tags and tags[name]:
                c["image"] = f"{name}:{tags[name]}"
    return docs


def resources(path):
    """The documents of a resource: a file, or a directory's kustomization
    (its resources in order)."""
    if path.is_dir():
        k = yaml.safe_load((path / "kustomization.yaml").read_text())
        return [d for r in k["resources"] for d in resources(path / r)]
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def find(docs, kind, name):
    for d in docs:
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return d
    raise SystemExit(f"render.py: no {kind}/{name} in the base")


def facts(docs):
    ds = find(docs, "DaemonSet", "faultline-collector")
    pod = ds["spec"]["template"]["spec"]
    c = next(c for c in pod["containers"] if c["name"] == "collector")
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = []
    for m in c["volumeMounts"]:
        v = vols[m["name"]]
        if "hostPath" in v:
            src = "hostPath:" + v["hostPath"]["path"]
        elif "projected" in v:
            src = "projected:" + ",".join(k for s in v["projected"]["sources"] for k in s)
        else:
            src = "configMap" if "configMap" in v else "emptyDir" if "emptyDir" in v else "other"
        mounts.append({
            "path": m["mountPath"],
            "readOnly": bool(m.get("readOnly")),
            "source": src,
            "propagation": m.get("mountPropagation", "None"),
        })
    audiences = [
        s["serviceAccountToken"]["audience"]
        for v in pod["volumes"]
        if "projected" in v
        for s in v["projected"]["sources"]
        if "serviceAccountToken" in s
    ]
    dep = find(docs, "Deployment", "faultline-correlator")
    cpod = dep["spec"]["template"]["spec"]
    cc = cpod["containers"][0]
    rule = find(docs, "PrometheusRule", "faultline")
    rules = yaml.safe_load((HERE.parent / "prometheus" / "faultline-rules.yaml").read_text())
    return {
        "kinds": sorted({f'{d["kind"]}/{d["metadata"]["name"]}' for d in docs}),
        "collector": {
            "image": c["image"],
            "args": c["args"],
            "env": [e["name"] for e in c.get("env", [])],
            "capabilities": c["securityContext"]["capabilities"],
            "hostPID": pod.get("hostPID", False),
            "mounts": mounts,
            "config": find(docs, "ConfigMap", "faultline-collector")["data"]["collector.toml"],
            "token_audiences": audiences,
        },
        "correlator": {
            "image": cc["image"],
            "args": cc["args"],
            "init_args": [c["args"] for c in cpod.get("initContainers", [])],
            "automount_token": cpod.get("automountServiceAccountToken", True),
            "config": find(docs, "ConfigMap", "faultline-correlator")["data"]["correlator.toml"],
        },
        "prometheus_rule_matches": rule["spec"]["groups"] == rules["groups"],
    }


def sync_rules():
    path = HERE / "monitoring.yaml"
    text = path.read_text()
    marker = "kind: PrometheusRule\n"
    head, _, rule = text.partition(marker)
    spec_at = rule.index("spec:\n") + len("spec:\n")
    rules = yaml.safe_load((HERE.parent / "prometheus" / "faultline-rules.yaml").read_text())
    body = yaml.safe_dump({"groups": rules["groups"]}, sort_keys=False, width=1000)
    body = "".join("  " + l + "\n" if l else "\n" for l in body.splitlines())
    path.write_text(head + marker + rule[:spec_at] + body)


def main():
    if "--sync-rules" in sys.argv[1:]:
        sync_rules()
        return
    docs = render()
    if "--facts" in sys.argv[1:]:
        print(json.dumps(facts(docs), indent=1))
    elif "--json" in sys.argv[1:]:
        print(json.dumps(docs, indent=1))
    else:
        print(yaml.safe_dump_all(docs, sort_keys=False), end="")


if __name__ == "__main__":
    main()
