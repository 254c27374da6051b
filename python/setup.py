"""pip install ./python: the rumor package (docs/python.md), its compiled extension rumor._rumor
and the rumor-run launcher, built offline with Debian's python3-setuptools, CMake and pybind11:

    /usr/bin/python3 -m venv --system-site-packages ~/rumor-env      # torch and numpy from Debian
    ~/rumor-env/bin/pip install --no-build-isolation ./python

The extension is the CMake project's target rumor_python (no second build description to keep
in step): built in a CMake build directory of its own under setuptools' build_temp, or in
RUMOR_CMAKE_BUILD_DIR when set (e.g. the checkout's build/: then only what changed is rebuilt),
and copied into the package. rumor-peer is not part of the Python package: build it with CMake
(`cmake --install build` installs both)."""
import glob
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(rumor VERSION ([0-9.]+)", f.read()).group(1)


class CMakeBuild(build_ext):
    """Builds rumor._rumor with CMake and puts it where setuptools packages extensions."""

    def build_extension(self, ext):
        build = os.environ.get("RUMOR_CMAKE_BUILD_DIR") or os.path.join(os.path.abspath(self.build_temp), "cmake")
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            cfg = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DRUMOR_PYTHON=ON",
                   "-DRUMOR_TESTS=OFF", f"-DPython3_EXECUTABLE={os.path.realpath(sys.executable)}"]
            if shutil.which("ninja"):
                cfg += ["-G", "Ninja"]
            subprocess.check_call(cfg)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.check_call(["cmake", "--build", build, "--target", "rumor_python", "-j", jobs])
        built = glob.glob(os.path.join(build, "python", "rumor", "_rumor*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one rumor/_rumor*.so in {build}/python, found {built}")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built[0], dest)


setup(
    name="rumor",
    version=version(),
    description="Decentralized gossip training for PyTorch loops: the Python front end of Rumor",
    packages=["rumor"],
    ext_modules=[Extension("rumor._rumor", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    entry_points={"console_scripts": ["rumor-run = rumor.run:main"]},
    python_requires=">=3.9",
    install_requires=["numpy"],
    zip_safe=False,
)
