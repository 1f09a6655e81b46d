"""The runner every sactool entry point goes through (:func:`run_guarded`): errors, interrupts
and unwritable standard streams turned into one line and the README's exit code.

It lives in the command line, not in :mod:`sactool.errors`, because it reaches up to the
fleet (a lone MPI rank aborts its job) and to the stream guards; the error types and the
signal handler stay in the leaf module every package imports.
"""

from __future__ import annotations

from sactool.errors import ExitCode, SactoolError, interrupt_code


def run_guarded(fn, *, debug: bool = False) -> int:
    """Run ``fn()`` the way every sactool entry point does and return the exit code.

    SactoolError → ``error: …``/``hint: …`` on stderr and its code (traceback only with ``debug``);
    Ctrl-C → ``interrupted``, 130 (SIGTERM after :func:`sactool.errors.handle_sigterm`: ``terminated``, 143); a
    closed stdout pipe (``| head``) → quiet, 0; stdout that cannot be written (``> /dev/full``,
    closed) → one line, 1; a closed stderr keeps the exit code; an output encoding without ``—``
    gets ASCII (:mod:`sactool.cli.streams`). ``fn`` may return an int
    exit code. Used by :func:`sactool.cli.app.main` and the fast probe path in :mod:`sactool.entry`.

    A signal that came after the work had finished (:func:`sactool.errors.settle`) stopped nothing:
    the result was saved, the exit status is the command's own (0: complete), and one line says
    which signal came and where the result is.
    """
    from sactool.cli.streams import guarded_streams
    from sactool.errors import handlers_installed, ignore_further_signals, signalled

    from sactool.errors import begin_command
    from sactool.records import forget_saved

    begin_command()
    forget_saved()
    with guarded_streams():
        code = _run(fn, debug)
        _say_kept(code)
    if signalled() or handlers_installed():
        # the exit status is decided: a signal from here on (GNU timeout's second one, or one as the
        # process ends, when Python's finalization has put the default action back) must not turn
        # the exit into a death by signal — a script reads 143 as "the record is incomplete"
        ignore_further_signals()
    if code:  # under mpirun, a rank failing before it joined its fleet must not leave the others waiting
        from sactool.fleet.mpi import abort_if_alone

        abort_if_alone(code)
    return code


def _say_kept(code: int) -> None:
    import signal
    import sys

    from sactool.errors import kept_signal
    from sactool.records import saved_paths

    sig = kept_signal()
    if sig is None:
        return
    what = "terminated (SIGTERM)" if sig == signal.SIGTERM else "interrupted (SIGINT)"
    saved = saved_paths()
    where = ("saved as " + ", ".join(str(p) for p in saved)) if saved else "no file was asked for"
    if code == 0:
        line = f"{what} after the work had finished: the result is complete, {where}"
    else:
        line = f"{what} after the work had finished" + (f"; {where}" if saved else "")
    from sactool.render import printable

    sys.stderr.write(printable(line + "\n"))
    sys.stderr.flush()


def _run(fn, debug: bool) -> int:
    import sys

    from sactool.cli.streams import quiet_closed_pipe

    try:
        rv = fn()
        sys.stdout.flush()  # a full disk shows here, inside the guard, not at interpreter exit
        return int(rv) if isinstance(rv, int) else int(ExitCode.OK)
    except SactoolError as e:
        if getattr(e, "quiet", False):  # fleet mode: rank 0 reports it for every rank
            return int(e.exit_code)
        if debug:
            import traceback

            traceback.print_exc()
        code = interrupt_code() if e.exit_code == ExitCode.INTERRUPTED else int(e.exit_code)
        import signal

        from sactool.errors import received_signal

        sig = received_signal()   # which signal cut the work short, where one did (not a fleet peer's)
        by = f" ({signal.Signals(sig).name})" if sig and code in (ExitCode.TERMINATED, ExitCode.INTERRUPTED) else ""
        from sactool.render import printable

        sys.stderr.write(printable(f"error: {e.message}{by}\n" + (f"hint: {e.hint}\n" if e.hint else "")))
        sys.stderr.flush()
        return code
    except KeyboardInterrupt:
        sys.stderr.write("terminated (SIGTERM)\n" if interrupt_code() == ExitCode.TERMINATED else "interrupted (SIGINT)\n")
        return interrupt_code()
    except BrokenPipeError:
        # stdout closed early: be quiet, and keep Python from complaining at exit
        quiet_closed_pipe()
        return int(ExitCode.OK)
