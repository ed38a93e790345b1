"""pipeprof: find where distributed Keras training on Horovod loses throughput to its input pipeline."""

__version__ = "0.1.0"
