"""The signal policy of every sactool process (errors.handle_sigterm), checked in a real interpreter with
real signals: a signal that arrives while Python runs a ctypes callback (llvmlite's object-cache hook, called
while numba compiles, is one) is printed and dropped by ctypes, so it must stay recorded and come back at
the next measurement step; a second signal while the first is on its way out is counted, not fatal."""

import subprocess
import sys
import textwrap

from fixtures.progress import default_sigint

CHILD = textwrap.dedent("""
    import ctypes, os, signal, sys, time
    from sactool.errors import check_signalled, handle_sigterm, Terminated, _SIGNALLED

    handle_sigterm()
    CB = ctypes.CFUNCTYPE(None)

    def inside_callback():
        os.kill(os.getpid(), signal.{sig})
        time.sleep(0.05)   # the handler runs here and its exception is dropped by ctypes

    CB(inside_callback)()
    print("after-callback", flush=True)
    try:
        check_signalled()
    except Terminated:
        print("raised Terminated", flush=True)
    except KeyboardInterrupt:
        print("raised KeyboardInterrupt", flush=True)
    try:
        os.kill(os.getpid(), signal.{sig})   # a second one: counted, not fatal
        time.sleep(0.05)
        print("survived second, count", _SIGNALLED["count"], flush=True)
    except BaseException as e:
        print("second raised", type(e).__name__, flush=True)
""")


def _run(sig: str) -> subprocess.CompletedProcess:
    # SIGINT at its default in the child: a suite started from a background job inherits it ignored,
    # and Python then installs no Ctrl-C handler — these tests failed only there (issue 27, N22)
    return subprocess.run([sys.executable, "-c", CHILD.format(sig=sig)], capture_output=True, text=True,
                          timeout=120, preexec_fn=default_sigint)


def test_sigterm_dropped_by_a_ctypes_callback_is_raised_at_the_next_step():
    p = _run("SIGTERM")
    assert p.returncode == 0, p.stderr
    assert "after-callback" in p.stdout
    assert "raised Terminated" in p.stdout
    assert "survived second, count 2" in p.stdout


def test_sigint_dropped_by_a_ctypes_callback_is_raised_at_the_next_step():
    p = _run("SIGINT")
    assert p.returncode == 0, p.stderr
    assert "raised KeyboardInterrupt" in p.stdout and "raised Terminated" not in p.stdout
    assert "survived second, count 2" in p.stdout


FINALIZE = textwrap.dedent("""
    import os, signal, sys, time
    from sactool.cli.guard import run_guarded
    from sactool.errors import handle_sigterm

    handle_sigterm()

    def work():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)

    code = run_guarded(work)
    # Python's finalization resets the handlers it installed to SIG_DFL: only an ignored signal
    # survives a late arrival there, so the disposition must be SIG_IGN from here on
    print("ignored" if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
          and signal.getsignal(signal.SIGINT) is signal.SIG_IGN else "handled", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)   # a late second one, as the process exits
    time.sleep(0.05)
    sys.exit(code)
""")


def test_a_signal_after_the_save_does_not_kill_the_exiting_process():
    p = subprocess.run([sys.executable, "-c", FINALIZE], capture_output=True, text=True, timeout=120,
                       preexec_fn=default_sigint)
    assert p.returncode == 143, (p.returncode, p.stderr)
    assert "terminated (SIGTERM)" in p.stderr
    assert "ignored" in p.stdout


DEFERRED = textwrap.dedent("""
    import os, signal, time
    from sactool.errors import Terminated, check_signalled, deferred_signals, pending_signal, _SIGNALLED

    before = signal.getsignal(signal.SIGTERM)
    try:
        with deferred_signals():   # what a fleet rank runs its collectives and its sweep under
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            check_signalled()      # deferred: the block stops at its own safe point
            print("recorded", pending_signal() == signal.SIGTERM, flush=True)
            os.kill(os.getpid(), signal.SIGTERM)   # a second one: counted, not fatal
            time.sleep(0.05)
            print("count", _SIGNALLED["count"], flush=True)
    except BaseException as e:
        print("raised inside", type(e).__name__, flush=True)
    print("restored", signal.getsignal(signal.SIGTERM) is before, flush=True)
    try:
        check_signalled()          # outside the block the recorded signal is raised again
    except Terminated:
        print("raised Terminated after", flush=True)
""")


def test_deferred_signals_record_the_first_and_count_the_rest():
    """The fleet's variant of the one policy (errors.deferred_signals), with real signals."""
    p = subprocess.run([sys.executable, "-c", DEFERRED], capture_output=True, text=True, timeout=120,
                       preexec_fn=default_sigint)
    assert p.returncode == 0, p.stderr
    assert "raised inside" not in p.stdout, p.stdout
    assert "recorded True" in p.stdout and "count 2" in p.stdout
    assert "restored True" in p.stdout and "raised Terminated after" in p.stdout


PINNED = textwrap.dedent("""
    import os, signal, threading, time
    from sactool.bench.threads import run_pinned
    from sactool.errors import handle_sigterm, Terminated

    handle_sigterm()
    main = threading.main_thread().ident

    def work(i):
        if i == 0:
            signal.pthread_kill(main, signal.{sig})   # arrives while the main thread joins the workers
        time.sleep(0.3)
        return i

    try:
        run_pinned([0, 0], work)
        print("returned", flush=True)
    except Terminated:
        print("raised Terminated", flush=True)
    except KeyboardInterrupt:
        print("raised KeyboardInterrupt", flush=True)
""")


def test_a_signal_while_pinned_threads_run_leaves_as_the_exception_it_came_as():
    """run_pinned lets the workers finish, then re-raises the interrupt it caught: a SIGTERM stays
    errors.Terminated (it was re-raised as a plain KeyboardInterrupt), a SIGINT a KeyboardInterrupt."""
    for sig, want in (("SIGTERM", "raised Terminated"), ("SIGINT", "raised KeyboardInterrupt")):
        r = subprocess.run([sys.executable, "-c", PINNED.format(sig=sig)], capture_output=True, text=True,
                           timeout=120, preexec_fn=default_sigint)
        assert r.stdout.strip() == want, (sig, r.stdout, r.stderr)
