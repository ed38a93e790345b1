"""The job one Horovod launch runs: the launcher writes it, every rank reads it.

It travels on the command line (zlib-compressed JSON in URL-safe base64, ~2 KB), so ranks
on other hosts need no shared file system to learn what to run.
"""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any

from pipeprof.config import build

# The line a failing rank prints for the launcher (which merges every rank's output into one
# stream); progress lines are pipeprof.progress'.
ERROR_TAG = "PIPEPROF-ERROR"


@dataclass(frozen=True)
class VariantSpec:
    name: str
    synthetic: bool
    pipeline: dict[str, Any] = field(default_factory=dict)  # the resolved PipelineConfig
    max_measure_s: float = (
        0.0  # adaptive measurement's limit for this variant; 0: train.max_measure_s
    )
    # adaptive, a real variant alternates with the synthetic twin for a paired gap; an ablation
    # rung does not: what it gives is its step time beside the rung before it
    paired: bool = True


@dataclass(frozen=True)
class Job:
    run_dir: str
    np: int
    scenario: dict[str, Any]  # Scenario.to_dict() after overrides
    data_root: str  # resolved dataset location ("" for factory sources)
    variants: list[VariantSpec]
    progress_every: int = 5
    stream: str = ""  # host:port of the launcher's collector; "" streams nothing
    stream_token: str = ""
    # what the distribution's ranks meet by, made by the launching process (its class's
    # ``rendezvous``: multi_worker_mirrored's workers' addresses, for TF_CONFIG)
    rendezvous: dict[str, Any] = field(default_factory=dict)
    # the points registered at run time by "module:Class", by axis (``plugins.added``)
    plugins: dict[str, dict[str, str]] = field(default_factory=dict)

    def encode(self) -> str:
        return base64.urlsafe_b64encode(
            zlib.compress(json.dumps(asdict(self)).encode(), 9)
        ).decode()

    @classmethod
    def decode(cls, text: str) -> Job:
        return build(
            cls, json.loads(zlib.decompress(base64.urlsafe_b64decode(text.encode()))), "job", ""
        )


ENV_SCRIPT_JOB = "PIPEPROF_SCRIPT_JOB"  # what `pipeprof compare -- CMD` asks of a user's script


@dataclass(frozen=True)
class ScriptJob:
    """What a user's own script does under ``pipeprof compare -- python train.py``: read by
    ``pipeprof.keras`` from the environment (the user's command line stays theirs)."""

    run_dir: str
    np: int
    mode: str = "compare"  # compare: the twin, then the real pipeline in rounds; ablate: each transformation alone
    variants: list[str] = field(default_factory=lambda: ["synthetic", "real"])
    train: dict[str, Any] = field(default_factory=dict)  # TrainConfig's measurement keys
    seconds: float = 2.0  # ablate: how long each prefix of the pipeline is measured
    # what makes the script's training data-parallel (train.engine): under "mirrored" its
    # one process drives np replicas, made for it where the host has no GPUs
    engine: str = "horovod"
    # what the distribution's processes meet at (``Job.rendezvous``'s, for the script's)
    rendezvous: dict[str, Any] = field(default_factory=dict)

    def encode(self) -> str:
        return base64.urlsafe_b64encode(
            zlib.compress(json.dumps(asdict(self)).encode(), 9)
        ).decode()

    @classmethod
    def decode(cls, text: str) -> ScriptJob:
        return build(
            cls,
            json.loads(zlib.decompress(base64.urlsafe_b64decode(text.encode()))),
            "script job",
            "",
        )
