"""The ground-truth suite: bottlenecks of a known size, and pipeprof's figures against them
(run.py)."""
