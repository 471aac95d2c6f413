"""AICR recipes as a stack baseline: read an NVIDIA AICR recipe YAML (``kind: RecipeMetadata``
or ``RecipeMixin``; ``apiVersion: aicr.run/v1beta1`` or ``aicr.nvidia.com/v1alpha1``) into a
:class:`correlators.drift.Baseline`.

Recipe shape (github.com/NVIDIA/aicr ``recipes/overlays/*.yaml``, ``recipes/mixins/*.yaml``)::

    kind: RecipeMetadata
    apiVersion: aicr.run/v1beta1
    metadata: {name: h200-ubuntu-training}
    spec:
      constraints:                     # name: {Type}.{Subtype}.{Key} measurement path
        - name: GPU.smi.driver-version
          value: ">= 570.124.06"       # "<op> <version>" (op: == != >= <= > <) or an exact value
      componentRefs:                   # deployed components with a pinned version
        - {name: gpu-operator, type: Helm, version: v26.3.2}

Constraint names read as faultstream components (:data:`CONSTRAINT_COMPONENTS`): the GPU
driver and CUDA versions nvidia-smi reports (``GPU.smi.driver-version`` /
``GPU.smi.cuda-version``, ``GPU.smi.driver_version`` in older recipes), the kernel release
(``OS.sysctl./proc/sys/kernel/osrelease``, ``K8s.node.kernel-version``). AICR measures no NCCL,
HCA firmware or Fabric Manager version: a recipe pins those as ``componentRefs`` named in
:data:`COMPONENT_REFS` (``nccl``, ``hca-firmware``, ``fabric-manager``, ...), whose ``version``
is an exact pin (``==``). Other constraints (``K8s.server.version``, ``OS.release.ID``) and
other components (Helm charts) say nothing about a node's stack and are skipped.

Errors: :class:`RecipeError` (names the file and the entry) for a file that is not a recipe,
an unknown ``kind``/``apiVersion``, a constraint without name/value, an unknown operator or a
version with no digit.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from correlators.drift import Baseline, Constraint

__all__ = ["API_VERSIONS", "COMPONENT_REFS", "CONSTRAINT_COMPONENTS", "KINDS", "RecipeError",
           "load_recipe", "parse_recipe"]

KINDS = ("RecipeMetadata", "RecipeMixin")
API_VERSIONS = ("aicr.run/v1beta1", "aicr.nvidia.com/v1alpha1")
#: AICR measurement path -> faultstream component.
CONSTRAINT_COMPONENTS: dict[str, str] = {
    "GPU.smi.driver-version": "driver",
    "GPU.smi.driver_version": "driver",
    "GPU.smi.cuda-version": "cuda",
    "GPU.smi.cuda_version": "cuda",
    "OS.sysctl./proc/sys/kernel/osrelease": "kernel",
    "K8s.node.kernel-version": "kernel",
}
#: componentRefs name -> faultstream component (version pinned exactly).
COMPONENT_REFS: dict[str, str] = {
    "nccl": "nccl",
    "nvidia-driver": "driver",
    "cuda": "cuda",
    "kernel": "kernel",
    "hca-firmware": "hca_firmware",
    "hca_firmware": "hca_firmware",
    "fabric-manager": "fabric_manager",
    "nvidia-fabricmanager": "fabric_manager",
}
_VALUE = re.compile(r"^\s*(?P<op>==|!=|>=|<=|>|<)?\s*(?P<version>\S(?:.*\S)?)\s*$")


class RecipeError(ValueError):
    """The recipe file is invalid; the message names the file and the entry."""


def _constraint(where: str, component: str, name: str, value: Any, *, exact_op: str = "") -> Constraint:
    m = _VALUE.match(str(value)) if value is not None else None
    if m is None:
        raise RecipeError(f"{where}: value {value!r} is not '<op> <version>' or a version")
    op, version = m["op"] or exact_op, m["version"]
    if re.search(r"[<>=!]", version):
        raise RecipeError(f"{where}: value {value!r}: unknown operator")
    if not re.search(r"\d", version):
        raise RecipeError(f"{where}: value {value!r}: {version!r} holds no version number")
    return Constraint(component=component, op=op, version=version, name=name)


def parse_recipe(data: Any, name: str = "recipe") -> Baseline:
    """A :class:`Baseline` from a parsed recipe document (``name`` for messages). Raises
    :class:`RecipeError`."""
    if not isinstance(data, dict):
        raise RecipeError(f"{name}: not a YAML mapping")
    kind, api = data.get("kind"), data.get("apiVersion")
    if kind not in KINDS:
        raise RecipeError(f"{name}: kind {kind!r} is not one of {KINDS}")
    if api not in API_VERSIONS:
        raise RecipeError(f"{name}: apiVersion {api!r} is not one of {API_VERSIONS}")
    meta = data.get("metadata") or {}
    spec = data.get("spec") or {}
    if not isinstance(spec, dict):
        raise RecipeError(f"{name}: spec must be a mapping")
    out: list[Constraint] = []
    for i, c in enumerate(spec.get("constraints") or []):
        where = f"{name}: spec.constraints[{i}]"
        if not isinstance(c, dict) or "name" not in c or "value" not in c:
            raise RecipeError(f"{where}: needs 'name' and 'value'")
        component = CONSTRAINT_COMPONENTS.get(str(c["name"]))
        if component is not None:
            out.append(_constraint(f"{where} ({c['name']})", component, str(c["name"]), c["value"]))
    for i, ref in enumerate(spec.get("componentRefs") or []):
        where = f"{name}: spec.componentRefs[{i}]"
        if not isinstance(ref, dict) or "name" not in ref:
            raise RecipeError(f"{where}: needs 'name'")
        component = COMPONENT_REFS.get(str(ref["name"]))
        if component is not None and ref.get("version") is not None:
            out.append(_constraint(f"{where} ({ref['name']})", component, f"componentRefs/{ref['name']}",
                                   str(ref["version"]).lstrip("v"), exact_op="=="))
    return Baseline(name=str(meta.get("name") or name), constraints=tuple(out))


def load_recipe(path: str | Path) -> Baseline:
    """Read one AICR recipe YAML file (one document) into a :class:`Baseline`. Raises
    :class:`RecipeError` for an invalid recipe and ``OSError`` when the file cannot be read."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise RecipeError(f"{p}: not valid YAML: {exc}") from exc
    return parse_recipe(data, str(p))
