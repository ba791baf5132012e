# scripts/ccache.sh (sourced by the build scripts, from the checkout's root): compile through ccache when it is
# installed (scripts/setup.sh installs it), so that a rebuild, or a fresh clone of the same commit on the same machine
# (CI's is one), reuses the objects of an earlier build instead of compiling every test again. Sets
# MAXTEXT_CCACHE_ARGS, CMake's compiler-launcher flags (empty without ccache or with MAXTEXT_CCACHE=off); the
# launcher carries ccache's settings, so a later `ninja -C build` uses them too.
# CCACHE_BASEDIR makes the paths ccache sees relative to the checkout, and no target compiles an absolute path of the
# checkout into its objects (tests/CMakeLists.txt, maxtext_test_paths): so the cache is shared between checkouts.
# No debug info in these builds, so the working directory does not change the objects (CCACHE_NOHASHDIR).
MAXTEXT_CCACHE_ARGS=()
if [ "${MAXTEXT_CCACHE:-on}" != off ] && command -v ccache >/dev/null 2>&1; then
  _maxtext_launcher="env;CCACHE_BASEDIR=$PWD;CCACHE_DIR=${CCACHE_DIR:-/var/tmp/maxtext-ccache}"
  _maxtext_launcher+=";CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-30G};CCACHE_NOHASHDIR=1;ccache"
  MAXTEXT_CCACHE_ARGS=("-DCMAKE_CXX_COMPILER_LAUNCHER=$_maxtext_launcher" "-DCMAKE_CUDA_COMPILER_LAUNCHER=$_maxtext_launcher")
fi
