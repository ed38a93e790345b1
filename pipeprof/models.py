"""Built-in models, and user factories named as "module:function"."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeprof.errors import PipeprofError

BUILTIN_MODELS = ("small_cnn", "resnet50v2", "mobilenetv2")
# The smallest input side each built-in model takes: small_cnn's three valid 3x3 convolutions
# and two 2x2 poolings need 18 px to leave the last convolution a 3x3 window; the Keras
# applications refuse anything under 32 px.
MIN_INPUT_SIDE = {"small_cnn": 18, "resnet50v2": 32, "mobilenetv2": 32}


def resolve_callable(spec: str, key: str) -> Callable[..., Any]:
    """Import ``module:function``; the current directory is searched first, like ``python -m``."""
    if ":" not in spec:
        raise PipeprofError(f"{key}: expected 'module:function', got {spec!r}")
    module_name, _, attr = spec.partition(":")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PipeprofError(f"{key}: cannot import module '{module_name}': {exc}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise PipeprofError(f"{key}: module '{module_name}' has no function '{attr}'")
    return fn


def build_model(name: str, input_shape: tuple[int, int, int], num_classes: int, keras: Any = None):
    """A Keras model producing logits: of ``keras`` (the ``keras`` package of Keras 3), or by
    default of TensorFlow's ``tf.keras`` (Keras 2 in TensorFlow 2.15)."""
    if keras is None:
        import tensorflow as tf

        keras = tf.keras
    three = str(getattr(keras, "__version__", "2")).startswith("3")
    first = (
        keras.Input(shape=input_shape)
        if three
        else keras.layers.InputLayer(input_shape=input_shape)
    )
    if name == "small_cnn":
        # The tiny CNN of the Horovod chips write-up: two conv blocks and a dense head.
        model = keras.Sequential(
            [
                first,
                keras.layers.Conv2D(32, 3, activation="relu"),
                keras.layers.MaxPooling2D(),
                keras.layers.Conv2D(64, 3, activation="relu"),
                keras.layers.MaxPooling2D(),
                keras.layers.Conv2D(64, 3, activation="relu"),
                keras.layers.GlobalAveragePooling2D(),
                keras.layers.Dense(128, activation="relu"),
                keras.layers.Dense(num_classes),
            ],
            name="small_cnn",
        )
    elif name == "resnet50v2":
        model = keras.applications.ResNet50V2(
            weights=None, input_shape=input_shape, classes=num_classes, classifier_activation=None
        )
    elif name == "mobilenetv2":
        model = keras.applications.MobileNetV2(
            weights=None, input_shape=input_shape, classes=num_classes, classifier_activation=None
        )
    elif ":" in name:
        model = resolve_callable(name, "model.name")(input_shape, num_classes)
        if not isinstance(model, keras.Model):
            raise PipeprofError(
                f"model.name {name} returned {type(model).__name__}, not a keras.Model"
            )
    else:
        raise PipeprofError(
            f"model.name: unknown model '{name}' (built-in: {', '.join(BUILTIN_MODELS)}; or 'module:function')"
        )
    return model
