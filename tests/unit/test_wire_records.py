"""The records that cross processes go through the scenario's typed loader: one schema, one-line errors."""

import base64
import json
import zlib

import pytest

from pipeprof.errors import PipeprofError
from pipeprof.launch.job import Job, VariantSpec
from pipeprof.records import StepRecord
from pipeprof.scenario import Scenario


def test_a_job_survives_the_command_line_with_its_variants_typed():
    job = Job(
        run_dir="/r",
        np=2,
        scenario=Scenario().to_dict(),
        data_root="/d",
        variants=[
            VariantSpec("synthetic", True, {}, 5.0),
            VariantSpec("real", False, {"parallel_calls": 2}),
        ],
    )
    back = Job.decode(job.encode())
    assert back == job and isinstance(back.variants[1], VariantSpec)


def test_a_malformed_job_is_one_line_naming_the_key():
    bad = {"run_dir": "/r", "np": "two", "scenario": {}, "data_root": "", "variants": []}
    text = base64.urlsafe_b64encode(zlib.compress(json.dumps(bad).encode())).decode()
    with pytest.raises(PipeprofError, match=r"^job: np must be int, got str 'two'$"):
        Job.decode(text)


def test_a_step_record_is_type_checked_and_keys_from_a_newer_pipeprof_are_skipped():
    rec = StepRecord(
        np=1,
        variant="real",
        rank=0,
        step=3,
        warmup=False,
        input_wait_ms=1.5,
        step_time_ms=20.0,
        batch_size=32,
        end_unix_s=1.0,
        paired="",
        round=2,
    )
    assert StepRecord.from_dict({**rec.to_dict(), "added_later": 7}) == rec
    with pytest.raises(PipeprofError, match="step record: batch_size must be int"):
        StepRecord.from_dict({**rec.to_dict(), "batch_size": "32"})
