# Shared set-up for the scripts: install Debian packages that are missing, configure and build.
# Sourced, not run.

RUMOR_PACKAGES=(build-essential cmake ninja-build libeigen3-dev libasio-dev libcereal-dev
  libspdlog-dev doctest-dev libcli11-dev zlib1g-dev libssl-dev libxxhash-dev libfmt-dev nlohmann-json3-dev openssl
  dataset-fashion-mnist python3-matplotlib python3-yaml clang libclang-rt-dev  # clang + libclang-rt-dev: libFuzzer (tests/run.sh)
  python3-dev pybind11-dev python3-numpy python3-torch python3-pytest  # the Python module (docs/python.md)
  prometheus-cpp-dev libcivetweb-dev  # rumor-peer --metrics-listen (docs/metrics.md)
  prometheus python3-prometheus-client chromium chromium-driver python3-selenium  # its tests (tests/ops/)
  python3-pip python3-setuptools python3-wheel python3-venv)  # pip install ./python (offline, in a venv)
# python3-yaml: tests/k8s. The Slurm test's packages are installed by examples/slurm/local-slurm.sh.

rumor_install_packages() {
  local missing=()
  for p in "${RUMOR_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing Debian packages: ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
      echo "error: missing packages and not root; run: sudo apt-get install ${missing[*]}" >&2
      return 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

rumor_build() {
  local build="$1"
  shift
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  if [ ! -f "$build/CMakeCache.txt" ]; then
    echo "== configuring in $build"
    cmake -S "$here" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
  fi
  echo "== building (this takes a few minutes on 2 cores)"
  cmake --build "$build" -j "$(nproc)"
}
