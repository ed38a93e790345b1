"""The commands as library calls: compare, watch, tune, predict and the ablation's diagnosis.

Each workflow plans (``plan``), readies the data (``data``), launches, listens to the ranks
(``live``) and summarises (``summary``); it tells its caller what happens through a
``Reporter`` (``events``) and never prints. The CLI and the tests call these.
"""
