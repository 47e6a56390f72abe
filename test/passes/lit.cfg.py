import os
import shutil

import lit.formats

# One lit file per jitckpt-opt pass (inline.test, partition.test, rewrite.test); the IR text they
# read lives in Inputs/, which holds no tests.
config.name = "jitckpt-passes"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".test"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.jitckpt_binary_dir, "test", "passes")
config.substitutions.append(("%jitckpt-opt", config.jitckpt_opt))
config.substitutions.append(("%python", config.python))
config.substitutions.append(
    ("%models", os.path.join(os.path.dirname(__file__), "..", "models", "lit_models.py")))
config.substitutions.append(("FileCheck", config.filecheck))

# `not CMD`: succeeds when CMD fails. RUN lines go to the external shell, where lit's built-in `not`
# does not exist: use LLVM's `not`, installed beside FileCheck (Debian: llvm-14-tools), else a
# Python stand-in. Replaced only where it starts a command: at the start of the RUN line (after the
# %dbg(RUN: at line N) marker lit puts there) or after | ; &.
_not = os.path.join(os.path.dirname(config.filecheck), "not")
if not os.access(_not, os.X_OK):
    _not = shutil.which("not") or (
        config.python + " -c 'import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]) == 0)'")
config.substitutions.append((r"(^(?:%dbg\([^)]*\))?\s*|(?<=[|;&])\s*)not(?=\s)", r"\1" + _not))
