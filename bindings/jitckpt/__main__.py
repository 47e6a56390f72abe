"""The jitckpt command line: `jitckpt ...` (installed by pip) and `python -m jitckpt ...`.

The commands themselves are the C++ program (`optimize`, `inspect`; `--help` lists them), found
in the package (jitckpt/bin/jitckpt, where pip installs it) or in the build tree. One option is
Python's own: `inspect MODEL --plot OUT.png` also draws the plan's time-memory curve
(jitckpt.plot, with matplotlib).
"""
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Tuple


def cli_program() -> Path:
    """The C++ command line: $JITCKPT_CLI, the package's bin/jitckpt, or the build tree's."""
    package = Path(__file__).resolve().parent
    candidates = [Path(os.environ["JITCKPT_CLI"])] if os.environ.get("JITCKPT_CLI") else []
    candidates += [package / "bin" / "jitckpt", package.parent.parent / "tools" / "cli" / "jitckpt"]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit(
        "error: the jitckpt command-line program is not installed beside this package ("
        + ", ".join(str(c) for c in candidates)
        + "); reinstall with `pip install .` or set JITCKPT_CLI"
    )


def _split_plot(args: List[str]) -> Tuple[List[str], Optional[str]]:
    """Takes `--plot PATH` (or `--plot=PATH`) out of an `inspect` command line."""
    if not args or args[0] != "inspect":
        return args, None
    rest: List[str] = []
    plot: Optional[str] = None
    i = 0
    while i < len(args):
        if args[i] == "--plot":
            if i + 1 >= len(args):
                raise SystemExit("error: --plot needs a file name, e.g. --plot curve.png")
            plot = args[i + 1]
            i += 2
            continue
        if args[i].startswith("--plot="):
            plot = args[i][len("--plot="):]
        else:
            rest.append(args[i])
        i += 1
    return rest, plot


def _draw(args: List[str], path: str) -> None:
    import torch

    from . import api
    from .plotting import plot
    from .torchscript import quiet_torchscript

    models = [a for a in args[1:] if not a.startswith("-")]
    if len(models) != 1:
        raise SystemExit("error: inspect --plot takes one model file")
    with quiet_torchscript():
        module = torch.jit.load(models[0])
    if not api.is_rewritten(module):
        raise SystemExit(f"error: '{models[0]}' was not rewritten by jitckpt; run `jitckpt optimize` on it first")
    plot(module, path)
    print(f"plotted the time-memory curve to {path}")


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    args, plot_path = _split_plot(args)
    status = subprocess.call([str(cli_program())] + args)
    if status == 0 and plot_path is not None:
        _draw(args, plot_path)
    return status


if __name__ == "__main__":
    sys.exit(main())
