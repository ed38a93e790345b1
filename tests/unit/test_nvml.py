"""The NVML wrapper degrades to 'n/a' instead of raising; tested through a fake backend."""

import logging

from pipeprof.telemetry.nvml import NA, Nvml
from tests.fakes.nvml import FakeGpu, FakeNvml


def two_gpus() -> FakeNvml:
    return FakeNvml(
        gpus=[
            FakeGpu(uuid="GPU-a"),
            FakeGpu(name="NVIDIA Fake A100", uuid="GPU-b", mem_total=40 * 2**30),
        ]
    )


def test_inventory_of_two_gpus():
    nv = Nvml(two_gpus())
    assert nv.available and nv.device_count() == 2
    inv = nv.inventory()
    assert [g["uuid"] for g in inv] == ["GPU-a", "GPU-b"]
    assert inv[1]["name"] == "NVIDIA Fake A100" and inv[1]["memory_total_mb"] == 40 * 1024


def test_missing_library_is_a_clean_no_nvml_state():
    nv = Nvml(FakeNvml(missing_library=True))
    assert not nv.available and "no NVML on this host" in nv.reason
    assert nv.device_count() == 0 and nv.inventory() == []
    assert nv.query("nvmlDeviceGetCount") is NA


def test_unsupported_query_is_na_and_reported_once(caplog):
    fake = two_gpus()
    fake.unsupported.add("nvmlDeviceGetPowerUsage")
    nv = Nvml(fake)
    h = nv.query("nvmlDeviceGetHandleByIndex", 0)
    with caplog.at_level(logging.WARNING, logger="pipeprof.nvml"):
        assert nv.query("nvmlDeviceGetPowerUsage", h) is NA
        assert nv.query("nvmlDeviceGetPowerUsage", h) is NA
    assert sum("nvmlDeviceGetPowerUsage" in r.message for r in caplog.records) == 1
    assert fake.calls.count("nvmlDeviceGetPowerUsage") == 1  # not asked again


def test_other_errors_are_na_but_asked_again():
    fake = two_gpus()
    fake.failing.add("nvmlDeviceGetUtilizationRates")
    nv = Nvml(fake)
    h = nv.query("nvmlDeviceGetHandleByIndex", 0)
    assert nv.query("nvmlDeviceGetUtilizationRates", h) is NA
    fake.failing.clear()
    assert nv.query("nvmlDeviceGetUtilizationRates", h).gpu == 50


def test_na_is_falsy_and_prints_na():
    assert not NA and repr(NA) == "n/a"


def test_real_pynvml_on_this_host_is_either_gpus_or_a_reason():
    nv = Nvml()  # the real nvidia-ml-py: on a host without a driver this is the "no NVML" state
    gpus = nv.inventory()
    if nv.available:  # a GPU host: every device named, with its memory
        assert nv.reason == "" and all(g["name"] and g["memory_total_mb"] > 0 for g in gpus)
    else:  # this development machine: no driver, said once, every query n/a
        assert gpus == [] and nv.reason.startswith("no NVML on this host (")
        assert nv.query("nvmlDeviceGetCount") is NA and nv.device_count() == 0
    nv.shutdown()
