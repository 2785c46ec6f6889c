"""Which machine types Vertex AI custom training offers, and which accelerators each one takes.

Kept as a data table (one row per machine family) so adding a family is one line, and so the checks in
``jobs.definition.validate`` stay generic. The API itself only rejects a bad combination after the job has
been queued (or, for some GPU counts, after it has been scheduled), which is why it is checked here before
submission. Sources: Vertex AI "Configure compute resources for custom training" and the MachineSpec REST
reference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """Machine types matching ``pattern`` take one of ``accelerators`` in one of the listed counts.

    ``counts_from_name``: the count is fixed by the machine type's ``-<N>g``/``-<N>t`` suffix
    (accelerator-optimized families). ``counts_by_accelerator`` narrows ``counts`` per GPU model (N1 takes
    8 V100s but at most 4 T4s). ``topologies`` maps a machine type to its allowed ``tpuTopology`` values
    (TPU v5e only).
    """

    name: str
    pattern: str
    accelerators: tuple[str, ...] = ()
    counts: tuple[int, ...] = ()
    counts_from_name: bool = False
    accelerator_required: bool = False
    topologies: tuple[tuple[str, tuple[str, ...]], ...] = ()
    counts_by_type: tuple[tuple[str, int], ...] = ()
    counts_by_accelerator: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def matches(self, machine_type: str) -> bool:
        return re.fullmatch(self.pattern, machine_type) is not None

    def allowed_counts(self, machine_type: str, accelerator: str = "") -> tuple[int, ...]:
        if self.counts_by_type:
            return tuple(n for t, n in self.counts_by_type if t == machine_type)
        if self.counts_from_name:
            return (int(re.search(r"-(\d+)[gt]$", machine_type).group(1)),)
        return next((c for a, c in self.counts_by_accelerator if a == accelerator), self.counts)

    def allowed_topologies(self, machine_type: str) -> tuple[str, ...]:
        return next((tops for t, tops in self.topologies if t == machine_type), ())


_N1_GPUS = ("NVIDIA_TESLA_T4", "NVIDIA_TESLA_V100", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_P4")
# Compute Engine attaches 1, 2 or 4 of these to an N1 VM; only V100 also comes as 8.
_N1_COUNTS = tuple((gpu, (1, 2, 4)) for gpu in _N1_GPUS if gpu != "NVIDIA_TESLA_V100")
_G2_L4_COUNTS = tuple(
    (f"g2-standard-{vcpus}", n)
    for vcpus, n in ((4, 1), (8, 1), (12, 1), (16, 1), (32, 1), (24, 2), (48, 4), (96, 8))
)
_V5E_TOPOLOGIES = (
    ("ct5lp-hightpu-1t", ("1x1",)),
    ("ct5lp-hightpu-4t", ("2x2",)),
    ("ct5lp-hightpu-8t", ("2x4",)),
)

# fmt: off
FAMILIES: tuple[Family, ...] = (
    # GPU families: N1 takes attached GPUs; accelerator-optimized types come with theirs (count in the name).
    Family("n1-standard", r"n1-standard-(4|8|16|32|64|96)", _N1_GPUS, (1, 2, 4, 8),
           counts_by_accelerator=_N1_COUNTS),
    Family("n1-highmem", r"n1-highmem-(2|4|8|16|32|64|96)", _N1_GPUS, (1, 2, 4, 8),
           counts_by_accelerator=_N1_COUNTS),
    Family("n1-highcpu", r"n1-highcpu-(16|32|64|96)", _N1_GPUS, (1, 2, 4, 8),
           counts_by_accelerator=_N1_COUNTS),
    Family("a2-highgpu", r"a2-highgpu-(1|2|4|8)g", ("NVIDIA_TESLA_A100",), counts_from_name=True,
           accelerator_required=True),
    Family("a2-megagpu", r"a2-megagpu-16g", ("NVIDIA_TESLA_A100",), (16,), accelerator_required=True),
    Family("a2-ultragpu", r"a2-ultragpu-(1|2|4|8)g", ("NVIDIA_A100_80GB",), counts_from_name=True,
           accelerator_required=True),
    Family("a3-highgpu", r"a3-highgpu-(1|2|4|8)g", ("NVIDIA_H100_80GB",), counts_from_name=True,
           accelerator_required=True),
    Family("a3-megagpu", r"a3-megagpu-8g", ("NVIDIA_H100_MEGA_80GB",), (8,), accelerator_required=True),
    Family("g2-standard", r"g2-standard-(4|8|12|16|24|32|48|96)", ("NVIDIA_L4",), accelerator_required=True,
           counts_by_type=_G2_L4_COUNTS),
    # TPUs: v2/v3 as an 8-core cloud-tpu; v5e single-host slices with their topology.
    Family("cloud-tpu", r"cloud-tpu", ("TPU_V2", "TPU_V3"), (8,), accelerator_required=True),
    Family("ct5lp-hightpu", r"ct5lp-hightpu-(1|4|8)t", ("TPU_V5_LITEPOD",), counts_from_name=True,
           topologies=_V5E_TOPOLOGIES),
    # CPU only.
    Family("e2-standard", r"e2-standard-(4|8|16|32)"),
    Family("e2-highmem", r"e2-highmem-(2|4|8|16)"),
    Family("e2-highcpu", r"e2-highcpu-(16|32)"),
    Family("n2-standard", r"n2-standard-(4|8|16|32|48|64|80)"),
    Family("n2-highmem", r"n2-highmem-(2|4|8|16|32|48|64|80)"),
    Family("n2-highcpu", r"n2-highcpu-(16|32|48|64|80)"),
    Family("c2-standard", r"c2-standard-(4|8|16|30|60)"),
)
# fmt: on

# Vertex AI's AcceleratorType enum names every TPU TPU_<generation>.
TPU_PREFIX = "TPU_"
# The v2/v3 TPU VM: one machine type, whose only size is 8 cores.
CLOUD_TPU = next(f for f in FAMILIES if f.name == "cloud-tpu")

FAMILY_NAMES = tuple(f"{f.name}-*" if f.name != "cloud-tpu" else f.name for f in FAMILIES)


def family_of(machine_type: str) -> Family | None:
    return next((f for f in FAMILIES if f.matches(machine_type)), None)


def carries_tpu(family: Family) -> bool:
    """A TPU machine family: every accelerator it takes is a TPU (cloud-tpu, ct5lp-hightpu-*)."""
    return bool(family.accelerators) and all(a.startswith(TPU_PREFIX) for a in family.accelerators)


def is_tpu(machine_type: str, accelerator: str = "") -> bool:
    """A machineSpec on a TPU: its accelerator is one, or its machine type only comes with one."""
    family = family_of(machine_type)
    return accelerator.startswith(TPU_PREFIX) or bool(family and carries_tpu(family))


def allowed_types(machine_type: str) -> str:
    """For an unknown machine type: the sizes of its family if the family is known, else the families."""
    family = next((f for f in FAMILIES if machine_type.startswith(f.name)), None)
    return example_types(family) if family else ", ".join(FAMILY_NAMES)


def example_types(family: Family) -> str:
    """The concrete machine types of a family, for an 'allowed:' message."""
    alternatives = re.search(r"\(([^)]*)\)", family.pattern)
    if not alternatives:
        return family.pattern
    head, tail = family.pattern.split("(", 1)[0], family.pattern.rsplit(")", 1)[1]
    return ", ".join(head + a + tail for a in alternatives.group(1).split("|"))
