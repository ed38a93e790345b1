"""A map stage that slows one rank's pipeline only: on rank ``rank`` (Horovod's rank, read where
the pipeline is built), the ground-truth suite's spin of ``iterations`` loop iterations per
element; on every other rank, nothing. ``rank = -1``: no rank is slowed."""

from pipeprof.rank.identity import identity


def spin_on_rank(rank: int, iterations: int):
    if identity().rank != rank:
        return lambda image, label: (image, label)
    from benchmarks.truth.inject import spin

    return spin(iterations)
