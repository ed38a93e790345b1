"""Scenarios: the built-ins load; every bad input is one line naming the file and the key."""

from pathlib import Path

import pytest

from pipeprof import scenario as scen
from pipeprof.errors import PipeprofError

BUILTINS = sorted(p.stem for p in scen.BUILTIN_SCENARIOS.glob("*.toml"))


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "s.toml"
    p.write_text(text)
    return p


def error_of(path, overrides=None) -> str:
    with pytest.raises(PipeprofError) as exc:
        scen.load(str(path), overrides)
    msg = exc.value.message
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("name", [n for n in BUILTINS if n != "imagenet-resnet50"])
def test_every_builtin_scenario_loads(name):
    s = scen.load(name)
    assert s.name == name
    assert s.variants and all(v.name != "synthetic" for v in s.variants)


def test_the_shipped_set_is_there():
    assert {"quickstart", "chips-cnn", "resnet50-cifar", "imagenet-resnet50"} <= set(BUILTINS)


def test_imagenet_scenario_names_its_missing_data(tmp_path):
    msg = error_of(scen.resolve_path("imagenet-resnet50"))
    assert "data.path" in msg and "does not exist" in msg


def test_default_is_quickstart():
    assert scen.load(None).name == "quickstart"


def test_unknown_key_names_file_and_dotted_key(tmp_path):
    p = write(tmp_path, "[pipeline.shuffle]\nbufer_size = 3\n")
    msg = error_of(p)
    assert str(p) in msg and "pipeline.shuffle.bufer_size" in msg and "buffer_size" in msg


def test_wrong_type_names_key_and_expected_type(tmp_path):
    p = write(tmp_path, '[train]\nbatch_size = "big"\n')
    msg = error_of(p)
    assert "train.batch_size" in msg and "int" in msg and "'big'" in msg


def test_bool_is_not_an_int(tmp_path):
    assert "train.batch_size" in error_of(write(tmp_path, "[train]\nbatch_size = true\n"))


def test_literal_choices_are_listed(tmp_path):
    msg = error_of(write(tmp_path, '[pipeline.cache]\nkind = "disk"\n'))
    assert "pipeline.cache.kind" in msg and "'memory'" in msg and "'file'" in msg


def test_autotune_or_int(tmp_path):
    s = scen.load(
        str(
            write(
                tmp_path,
                '[pipeline]\nparallel_calls = 4\n[pipeline.prefetch]\ndepth = "autotune"\n',
            )
        )
    )
    assert s.pipeline.parallel_calls == 4 and s.pipeline.prefetch.depth == "autotune"
    assert "pipeline.parallel_calls" in error_of(
        write(tmp_path, '[pipeline]\nparallel_calls = "lots"\n')
    )


def test_missing_data_path_is_named(tmp_path):
    msg = error_of(write(tmp_path, '[data]\nsource = "folder"\npath = "nowhere/at/all"\n'))
    assert "data.path" in msg and "nowhere/at/all" in msg


def test_folder_path_relative_to_the_scenario_file(tmp_path):
    (tmp_path / "imgs" / "a").mkdir(parents=True)
    s = scen.load(str(write(tmp_path, '[data]\nsource = "folder"\npath = "imgs"\n')))
    assert s.data.path == "imgs"


def test_invalid_toml_is_one_line(tmp_path):
    assert "not valid TOML" in error_of(write(tmp_path, "[train\n"))


def test_unknown_builtin_lists_the_known_ones():
    with pytest.raises(PipeprofError, match="quickstart"):
        scen.resolve_path("no-such-scenario")


def test_missing_file():
    with pytest.raises(PipeprofError, match="does not exist"):
        scen.resolve_path("/no/such/file.toml")


def test_variant_overrides_merge_and_are_validated(tmp_path):
    p = write(
        tmp_path,
        '[[variants]]\nname = "no-aug"\n[variants.pipeline.augment]\nenabled = false\n'
        '[[variants]]\nname = "full"\n',
    )
    s = scen.load(str(p))
    assert not s.variant_pipeline(s.variants[0]).augment.enabled
    assert s.variant_pipeline(s.variants[1]).augment.enabled
    bad = write(tmp_path, '[[variants]]\nname = "x"\n[variants.pipeline.augment]\nenabld = false\n')
    assert "variants.x.pipeline.augment.enabld" in error_of(bad)


def test_variant_named_synthetic_is_refused(tmp_path):
    assert "synthetic" in error_of(write(tmp_path, '[[variants]]\nname = "synthetic"\n'))


def test_read_cannot_be_off_in_a_real_variant(tmp_path):
    assert "read.enabled" in error_of(write(tmp_path, "[pipeline.read]\nenabled = false\n"))


def test_a_storage_limit_and_a_map_of_ones_own_are_checked(tmp_path):
    msg = error_of(write(tmp_path, "[pipeline.read]\nthrottle_mb_s = -1.0\n"))
    assert msg.endswith("pipeline.read.throttle_mb_s must be >= 0 (0: no limit), got -1.0")
    msg = error_of(
        write(
            tmp_path, "[pipeline.read]\nthrottle_mb_s = 5.0\n[pipeline.service]\nenabled = true\n"
        )
    )
    assert "pipeline.read.throttle_mb_s cannot go with the tf.data service" in msg
    msg = error_of(write(tmp_path, '[pipeline.map]\nfunction = "spin"\n'))
    assert msg.endswith("pipeline.map.function must be 'module:function', got 'spin'")
    assert "pipeline.map.kwargs needs map.function" in error_of(
        write(tmp_path, "[pipeline.map.kwargs]\nn = 3\n")
    )
    msg = error_of(
        write(
            tmp_path,
            '[data]\nsource = "factory"\nfactory = "m:f"\n[pipeline.read]\nthrottle_mb_s = 5.0\n',
        )
    )
    assert (
        'pipeline.read.throttle_mb_s limits reading files, and data.source = "factory" reads none'
        in msg
    )
    ok = scen.load(str(write(tmp_path, '[pipeline.map]\nfunction = "m:f"\nkwargs = { n = 3 }\n')))
    assert ok.pipeline.map.kwargs == {"n": 3}


def test_global_batch_must_divide_by_every_worker_count(tmp_path):
    p = write(tmp_path, '[train]\nbatch_size = 64\nbatch_mode = "global"\n[launch]\nnp = [1, 3]\n')
    assert "train.batch_size" in error_of(p)


def test_overrides_beat_the_file_and_are_validated(tmp_path):
    p = write(tmp_path, "[train]\nbatch_size = 8\n")
    s = scen.load(
        str(p),
        [
            scen.parse_override("train.batch_size=16"),
            scen.parse_override("pipeline.cache.kind=file"),
        ],
    )
    assert s.train.batch_size == 16 and s.pipeline.cache.kind == "file"
    assert "train.batch_sise" in error_of(p, [scen.parse_override("train.batch_sise=3")])


def test_override_needs_key_value():
    with pytest.raises(PipeprofError, match="KEY=VALUE"):
        scen.parse_override("train.batch_size")


def test_cache_after_augment_warns():
    p = scen.PipelineConfig(cache=scen.CacheConfig(enabled=True, placement="after_augment"))
    assert "frozen" in scen.cache_warning(p)
    assert scen.cache_warning(scen.PipelineConfig()) is None


def test_round_trip_through_dict():
    s = scen.load("quickstart")
    again = scen.Scenario.from_dict({k: v for k, v in s.to_dict().items() if k != "source_file"})
    assert again.to_dict() | {"source_file": s.source_file} == s.to_dict()


def test_an_input_too_small_for_the_model_is_named_before_any_launch(tmp_path):
    p = write(
        tmp_path,
        '[data]\nimage_size = 16\n[data.generate]\nsize = 16\n[model]\nname = "small_cnn"\n',
    )
    msg = error_of(p)
    assert "data.image_size" in msg and "at least 18" in msg and "small_cnn" in msg
    p = write(tmp_path, '[data]\nimage_size = 24\n[model]\nname = "resnet50v2"\n')
    assert "at least 32" in error_of(p)


@pytest.mark.parametrize("side, builds", [(17, False), (18, True)])
def test_small_cnn_s_smallest_input_is_the_one_the_scenario_checks(side, builds):
    from pipeprof.models import MIN_INPUT_SIDE, build_model

    assert MIN_INPUT_SIDE["small_cnn"] == 18
    if builds:
        assert build_model("small_cnn", (side, side, 3), 10).output_shape == (None, 10)
    else:
        with pytest.raises(ValueError, match="Negative dimension"):
            build_model("small_cnn", (side, side, 3), 10)
