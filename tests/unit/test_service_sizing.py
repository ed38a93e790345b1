"""Sizing tf.data service: workers = the ranks' rate ÷ one worker's, checked by hand."""

import math

import pytest

from pipeprof.analysis import service_sizing


def test_workers_follow_the_autoscaling_rule_by_hand():
    # one worker: 8 cores / 2.5 core-ms per sample = 3,200 samples/s
    got = {s.np: s for s in service_sizing.size({1: 1000.0, 8: 8000.0, 32: 32000.0}, 2.5, 8)}
    assert got[8].worker_samples_per_s == pytest.approx(3200.0)
    # np=8: 8,000 / 3,200 = 2.5 → 3 workers, 24 cores; half as many (1) make 3,200: 60% short
    assert (got[8].workers, got[8].cores, got[8].fewer_workers) == (3, 24.0, 1)
    assert got[8].gap_with_fewer_pct == pytest.approx(60.0)
    # np=32: exactly 10 workers (no rounding up past a whole number); 5 make half the rate
    assert (got[32].workers, got[32].cores, got[32].fewer_workers) == (10, 80.0, 5)
    assert got[32].gap_with_fewer_pct == pytest.approx(50.0)
    # np=1: one worker is enough and there is nothing fewer to try
    assert (got[1].workers, got[1].fewer_workers) == (1, 0) and math.isnan(
        got[1].gap_with_fewer_pct
    )


def test_a_worker_without_cost_or_cores_is_refused():
    with pytest.raises(ValueError):
        service_sizing.worker_rate(0.0, 8)
    with pytest.raises(ValueError):
        service_sizing.worker_rate(2.5, 0)


STEP_HEADER = (
    "np,variant,rank,step,warmup,input_wait_ms,step_time_ms,batch_size,end_unix_s,paired,round"
)


def test_a_workers_cost_counts_only_the_measured_steps_by_hand(tmp_path):
    """One worker, one rank, 10 samples a step of 0.5 s. Its CPU (its log's lines):
    - 0.9 s in the warm-up before the first round (its start; 100.0-101.0);
    - 0.3 s in the round's settle step (refilling what the flush dropped; 101.0-101.5);
    - 0.8 s in the round's 4 measured steps (101.5-103.5: 40 samples);
    - 0.6 s stocking while the twin ran (103.5-105.0).
    Its cost is 0.8 s / 40 samples = 20 core-ms a sample; counting the warm-up and the settle
    step would say 2.0 s / 70 = 28.6."""
    from pipeprof.launch.service_processes import worker_log
    from pipeprof.workflows.service_around_launch import log_dir, worker_cost

    rows = [(0, True, 100.5, -1), (1, True, 101.0, -1), (2, True, 101.5, 0)]
    rows += [(3 + k, False, 102.0 + 0.5 * k, 0) for k in range(4)]
    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "np2-svc.csv").write_text(
        "\n".join(
            [STEP_HEADER] + [f"2,svc,0,{s},{w},0.0,500.0,10,{end},,{r}" for s, w, end, r in rows]
        )
        + "\n"
    )
    service = log_dir(tmp_path, 2)
    service.mkdir(parents=True)
    (service / "workers.json").write_text(
        '{"workers": 1, "hosts": [], "cpu_s": [2.6], "variants": ["svc"]}\n'
    )
    worker_log(service, 0).write_text(
        "".join(
            f"pipeprof tf.data service cpu_s {cpu} {at}\n"
            for at, cpu in [(100.0, 0.0), (101.0, 0.9), (101.5, 1.2), (103.5, 2.0), (105.0, 2.6)]
        )
    )
    cost, np_ = worker_cost(tmp_path)
    assert np_ == 2 and cost == pytest.approx(20.0)
