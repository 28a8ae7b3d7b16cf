#!/usr/bin/env bash
# Install what harness needs on a fresh Debian machine: compilers and cross toolchains, qemu
# (emulated boards), perf, sshd (tests), Slurm and munge (cluster tests), Chromium (HTML report test),
# then the Python package.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
PACKAGES="python3 python3-pip openssh-server openssh-client clang lld llvm g++ binutils \
  g++-riscv64-linux-gnu g++-aarch64-linux-gnu qemu-user linux-perf libomp-dev chromium slurm-wlm munge libopenblas-dev"
# OpenBLAS for the emulated aarch64 board's library row (static, linked like the variants; on x86-64
# the row takes scipy-openblas32 from pip, below). Debian bookworm has no riscv64 packages: riscv64
# targets fall back to lib:reference and say so (harness/library.py, RISCV64_WHY).
if [ "$(dpkg --print-architecture)" != arm64 ]; then
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64
    NEED_UPDATE=1
  fi
  PACKAGES="$PACKAGES libopenblas-dev:arm64"
fi
missing=""
for p in $PACKAGES; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ] || [ -n "${NEED_UPDATE:-}" ]; then
  echo "installing Debian packages:$missing"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
# cpu: scipy-openblas32 (OpenBLAS 0.3.34, the x86-64 library row; Debian's 0.3.21 runs a generic
# core on CPUs newer than it) and threadpoolctl (bench/cpu_vs_library.py names numpy's core)
python3 -m pip install -q --disable-pip-version-check -e ".[test,gpu,cpu]"
echo "harness is installed: $(command -v harness)"
