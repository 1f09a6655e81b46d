"""Stand-in SGLang server for tests of ``sactool serve`` (not SGLang).

Writes its pid, argv and the SGLang/sactool environment to ``$STANDIN_RECORD`` (JSON), then:
``STANDIN_EXIT=N`` exits at once with N; otherwise waits for SIGTERM/SIGINT and exits with
``STANDIN_SIGNAL_EXIT`` (default 143 = 128 + SIGTERM, what a server killed by TERM reports).
"""

import json
import os
import signal
import sys
import time


def main() -> int:
    keep = {k: v for k, v in os.environ.items() if k.startswith(("SGLANG_", "SACTOOL_"))}
    rec = {"pid": os.getpid(), "argv": sys.argv[1:], "env": keep}
    got = []
    code = int(os.environ.get("STANDIN_SIGNAL_EXIT", "143"))
    # the handlers first: the record is the test's cue to signal, so it must not come before them
    signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    signal.signal(signal.SIGINT, lambda s, f: got.append(s))
    path = os.environ.get("STANDIN_RECORD")
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(rec, f)
        os.replace(tmp, path)
    if "STANDIN_EXIT" in os.environ:
        return int(os.environ["STANDIN_EXIT"])
    deadline = time.monotonic() + float(os.environ.get("STANDIN_TIMEOUT_S", "120"))
    while not got and time.monotonic() < deadline:
        time.sleep(0.02)
    if not got:
        return 99
    sys.stderr.write(f"stand-in server: got signal {got[0]}, exiting {code}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
