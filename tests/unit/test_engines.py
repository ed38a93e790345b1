"""The engines' pure parts: the registry, and what multi_worker_mirrored's workers are told."""

import json

from pipeprof.rank.engine import ENGINES
from pipeprof.rank.multiworker_engine import tf_config
from pipeprof.scenario import LaunchConfig, Scenario, TrainConfig
from pipeprof.workflows.compare import TF_WORKER_PORT, tf_workers


def test_the_three_engines_are_registered_by_name():
    assert {"horovod", "mirrored", "multi_worker_mirrored"} <= set(ENGINES)


def test_each_worker_is_told_the_whole_cluster_and_its_own_index():
    config = json.loads(tf_config(["a:1", "b:2"], 1))
    assert config == {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}


def test_the_cluster_follows_the_launchs_placement_one_port_per_local_rank():
    scenario = Scenario(
        train=TrainConfig(engine="multi_worker_mirrored"), launch=LaunchConfig(hosts="a:2,b:1")
    )
    base = TF_WORKER_PORT + 64 * 3  # np=3
    assert tf_workers(scenario, 3) == [f"a:{base}", f"a:{base + 1}", f"b:{base}"]
    assert tf_workers(Scenario(launch=LaunchConfig(hosts="a:2,b:1")), 3) == []  # horovod: none
