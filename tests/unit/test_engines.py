"""The distributions' pure parts: the registry, and what multi_worker_mirrored's workers are told."""

import json

from pipeprof import plugins
from pipeprof.distributions import rendezvous_of
from pipeprof.distributions.multi_worker_mirrored import WORKER_PORT, tf_config
from pipeprof.scenario import LaunchConfig


def test_the_three_engines_are_registered_by_name():
    assert {"horovod", "mirrored", "multi_worker_mirrored"} <= set(
        plugins.names(plugins.DISTRIBUTION)
    )


def test_each_worker_is_told_the_whole_cluster_and_its_own_index():
    config = json.loads(tf_config(["a:1", "b:2"], 1))
    assert config == {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}


def test_the_cluster_follows_the_launchs_placement_one_port_per_local_rank():
    launch = LaunchConfig(hosts="a:2,b:1")
    base = WORKER_PORT + 64 * 3  # np=3
    assert rendezvous_of("multi_worker_mirrored", 3, launch, "") == {
        "workers": [f"a:{base}", f"a:{base + 1}", f"b:{base}"]
    }
    assert rendezvous_of("horovod", 3, launch, "") == {}  # horovod: its launcher's
