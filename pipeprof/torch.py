"""pipeprof in your own PyTorch training script: two lines.

    import pipeprof.torch as pt
    loader = pt.instrument(loader)                 # your DataLoader, or any iterable of batches
    for x, y in loader:
        with pt.step() as s:                       # around the training step
            s.loss = train_step(x, y)

or ``train_step = pt.step_fn(train_step)`` in place of the ``with``. Outside pipeprof they
change nothing: ``instrument`` returns the loader itself and ``step`` does nothing. Under
``pipeprof compare --engine ddp --np 1,2 -- python train.py`` (one launch per worker count;
the script calls ``torch.distributed.init_process_group()`` as it does under torchrun: the
launch sets ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK`` and ``WORLD_SIZE``) the loop measures
the synthetic twin (the loop's first batch, handed again) alone, then the loader in rounds
against it, and its iteration ends once the gap is known. The step ends when its work has:
a CUDA sync on a GPU. Under ``pipeprof watch -- CMD`` the steps stream to the dashboard.
"""

from __future__ import annotations

from typing import Any

from pipeprof.rank import in_script
from pipeprof.rank.loop import LoopDataset, StepMark
from pipeprof.rank.loop import step_fn as _step_fn

in_script.prepare_distribution()  # before the script starts its process group


def instrument(loader: Any) -> Any:
    """Your loader, as pipeprof needs it: itself outside pipeprof; under pipeprof, the same
    loader whose iteration by your loop is measured."""
    job = in_script.job()
    if job is None and not any(in_script.listening()):
        return loader
    if job is not None and job.mode == "ablate":
        in_script.fail(
            f"--ablation splits a tf.data pipeline into its stages; a {type(loader).__name__} "
            "has none to split: compare without --ablation"
        )
    return LoopDataset(loader, None)


def step() -> StepMark:
    """A training step, marked: ``with pt.step() as s:``; set ``s.loss`` for the summary."""
    return StepMark()


def step_fn(fn: Any) -> Any:
    """``fn``, your training step, each call marked as ``step()`` marks it."""
    return _step_fn(fn)


__all__ = ["instrument", "step", "step_fn"]
