"""pip install . : builds the C++ libraries, jitckpt._C and the command line with CMake against the
torch of the interpreter that runs pip, and installs them inside the jitckpt package (CMake's
"python" install component). Metadata: pyproject.toml.

Environment: JITCKPT_BUILD_DIR reuses a CMake build folder (configured and built as it is, for
instance the one ./scripts/test.sh made) instead of configuring one of its own;
JITCKPT_CMAKE_ARGS adds CMake options; JITCKPT_BUILD_JOBS sets the parallel jobs.
"""
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        package_root = Path(self.get_ext_fullpath(ext.name)).resolve().parent.parent
        reused = os.environ.get("JITCKPT_BUILD_DIR")
        build_dir = Path(reused).resolve() if reused else Path(self.build_temp).resolve() / "cmake"
        if not reused:
            subprocess.run(self.configure_command(build_dir), check=True)
        jobs = os.environ.get("JITCKPT_BUILD_JOBS", str(os.cpu_count() or 1))
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "_C", "jitckpt-cli", "-j", jobs],
                       check=True)
        subprocess.run(["cmake", "--install", str(build_dir), "--component", "python",
                        "--prefix", str(package_root)], check=True)

    @staticmethod
    def configure_command(build_dir: Path) -> list:
        import torch  # the torch this interpreter sees: Debian's 1.13, or a PyTorch 2.x install

        command = ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                   f"-DPython3_EXECUTABLE={sys.executable}",
                   f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
                   "-DJITCKPT_BUILD_TESTS=OFF", "-DJITCKPT_BUILD_BENCH=OFF"]
        if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
            command += ["-G", "Ninja"]
        return command + shlex.split(os.environ.get("JITCKPT_CMAKE_ARGS", ""))


(ROOT / ".pip-build").mkdir(exist_ok=True)
setup(
    ext_modules=[Extension("jitckpt._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # Out of the source tree's build/ (CMake's usual build folder).
    options={"build": {"build_base": str(ROOT / ".pip-build")}, "egg_info": {"egg_base": str(ROOT / ".pip-build")}},
)
