"""signals.Catch: a stop signal inside the block ends it, and says how the run of launches ended."""

import signal

from pipeprof.launch import signals


def test_a_caught_stop_signal_ends_the_block_and_becomes_the_outcome():
    caught = signals.Catch()
    with caught:
        raise signals.Interrupted(signal.SIGHUP)
    assert caught.signum == signal.SIGHUP
    failure, signum = caught.outcome(None, None, "runs/x")
    assert failure == "interrupted by SIGHUP (run directory: runs/x)" and signum == signal.SIGHUP
    # a failure already said is kept; the signal still decides the exit
    assert caught.outcome("np=2: rank 1 died", None, "runs/x") == (
        "np=2: rank 1 died",
        signal.SIGHUP,
    )


def test_ctrl_c_is_sigint_and_without_a_signal_the_outcome_is_unchanged():
    caught = signals.Catch()
    with caught:
        raise KeyboardInterrupt
    assert caught.signum == signal.SIGINT and signals.exit_code(caught.signum) == 130
    quiet = signals.Catch()
    with quiet:
        pass
    assert quiet.outcome("np=1: failed", 15, "d") == ("np=1: failed", 15) and quiet.outcome(
        None, None, "d"
    ) == (None, None)
