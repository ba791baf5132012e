"""Builds the maxtext_cpp extension with CMake (python/CMakeLists.txt) and packages it with the model configs.

    pip install --no-build-isolation .      # offline: uses the installed setuptools, CMake, Ninja and pybind11

Environment: MAXTEXT_PY_BUILD_DIR (default build-python/ in the checkout; an existing CMake build dir is reused
as configured, e.g. build/, its interpreter included), MAXTEXT_PY_JOBS (parallel compile jobs, default: all cores), MAXTEXT_PY_CMAKE_ARGS
(extra configure arguments, e.g. "-DMAXTEXT_NATIVE=OFF" for a package that runs on other CPUs).
"""
import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.path.abspath(os.environ.get("MAXTEXT_PY_BUILD_DIR", os.path.join(ROOT, "build-python")))
        args = ["cmake", "-S", ROOT, "-B", build_dir, "-DMAXTEXT_BUILD_PYTHON=ON"]
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):  # a fresh dir: only the module, for us
            args += ["-G", "Ninja" if shutil.which("ninja") else "Unix Makefiles", "-DCMAKE_BUILD_TYPE=Release",
                     f"-DPYTHON_EXECUTABLE={sys.executable}",
                     "-DMAXTEXT_BUILD_TESTS=OFF", "-DMAXTEXT_BUILD_TOOLS=OFF", "-DMAXTEXT_BUILD_EXAMPLES=OFF",
                     "-DMAXTEXT_BUILD_BENCH=OFF"]
        args += shlex.split(os.environ.get("MAXTEXT_PY_CMAKE_ARGS", ""))
        subprocess.check_call(args)
        jobs = os.environ.get("MAXTEXT_PY_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "maxtext_python", "-j", jobs])
        built = glob.glob(os.path.join(build_dir, "python", "maxtext_cpp", "_maxtext_cpp*.so"))
        if not built:
            raise RuntimeError(f"the CMake build in {build_dir} produced no _maxtext_cpp module")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built[0], dest)
        # configs/models/<name>.yml, found by Config(...) through model_name like MaxText's
        configs = os.path.join(os.path.dirname(dest), "configs")
        shutil.rmtree(configs, ignore_errors=True)
        shutil.copytree(os.path.join(ROOT, "configs"), configs)


setup(
    packages=["maxtext_cpp"],
    package_dir={"maxtext_cpp": "python/maxtext_cpp"},
    ext_modules=[Extension("maxtext_cpp._maxtext_cpp", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
    options={"build": {"build_base": os.path.join("build-python", "setuptools")}},
)
