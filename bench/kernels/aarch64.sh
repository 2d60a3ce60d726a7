#!/usr/bin/env bash
# The README's install on Linux aarch64, checked under qemu user emulation (not on hardware).
# NOT run in CI: it builds a Debian root file system and runs everything emulated (~30-60 min on
# 2 cores). Run it as root on a Debian/Ubuntu x86_64 machine with network to Debian and PyPI:
#
#   sudo bench/kernels/aarch64.sh [ROOT]     # ROOT: where the arm64 Debian goes (default /tmp/arm64root)
#
# It installs debootstrap + qemu-user-static, builds an arm64 Debian bookworm, installs there only
# the README's prerequisites (python3, python3-venv, g++, make, git), clones this checkout's HEAD
# as an ordinary user, runs `make install`, then `transcribe doctor`, `examples/jfk.flac` with the
# network cut (unshare -n: the model must come from the installed package) and the native kernel
# tests, and prints each step's result and wall time.
#
# The emulated CPU is a Neoverse N1 (QEMU_CPU, as AWS Graviton2): qemu's default "max" CPU also
# offers SME, OpenBLAS then picks its armv9sme kernels, and those give wrong sums under qemu 7.2
# (transcriber declines that BLAS with a note: "gave a wrong matmul result: not used").
set -euo pipefail
ROOT=${1:-/tmp/arm64root}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
CPU=${QEMU_CPU:-neoverse-n1}
LOG=$ROOT.logs
SUMMARY=()

step() {  # step NAME COMMAND...: run, log to $LOG/NAME.log, record result and wall time
  local name=$1 t0=$SECONDS rc=0
  shift
  echo "== $name" >&2
  set +e  # the step runs with errexit on (in a subshell), its failure is recorded, not fatal
  ( set -e; "$@" ) >"$LOG/$name.log" 2>&1
  rc=$?
  set -e
  SUMMARY+=("$(printf '%-14s %s  %4ds  (%s)' "$name" "$([ $rc = 0 ] && echo ok || echo "FAILED rc=$rc")" \
    $((SECONDS - t0)) "$(grep -v '^\s*$' "$LOG/$name.log" | tail -1 | cut -c1-110)")")
  return 0
}

as_user() {  # the chroot's ordinary user, a clean environment, the emulated CPU
  chroot --userspec=user:user "$ROOT" env -i HOME=/home/user PATH=/usr/bin:/bin QEMU_CPU="$CPU" \
    bash -c "cd ~/transcriber && $1"
}

host_setup() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap qemu-user-static binfmt-support
  # binfmt_misc runs the chroot's aarch64 programs through qemu-aarch64-static
  [ -e /proc/sys/fs/binfmt_misc/status ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64
}

make_root() {
  [ -x "$ROOT/usr/bin/apt-get" ] ||
    debootstrap --arch=arm64 --variant=minbase --include=ca-certificates bookworm "$ROOT" http://deb.debian.org/debian
  cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
  # a TLS-intercepting proxy's CA, where the host has one, so pip in the chroot reaches PyPI
  cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/" 2>/dev/null || true
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$ROOT/etc/pip.conf"
  mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
  mountpoint -q "$ROOT/dev" || mount --rbind /dev "$ROOT/dev"
  mountpoint -q "$ROOT/sys" || mount -t sysfs sysfs "$ROOT/sys"
  mountpoint -q "$ROOT/tmp" || mount -t tmpfs tmpfs "$ROOT/tmp"
  chroot "$ROOT" update-ca-certificates
  # the README's prerequisites, nothing more
  chroot "$ROOT" env DEBIAN_FRONTEND=noninteractive sh -c \
    'apt-get update -q && apt-get install -y -q --no-install-recommends python3 python3-venv g++ make git'
  chroot "$ROOT" id -u user >/dev/null 2>&1 || chroot "$ROOT" useradd -m -s /bin/bash user
  rm -rf "$ROOT/home/user/transcriber" "$ROOT/home/user/.cache/transcriber"
  git clone -q "$REPO" "$ROOT/home/user/transcriber"
  chroot "$ROOT" chown -R user:user /home/user
}

renice -n 19 -p $$ >/dev/null  # emulation is slow: every step yields the CPU to other work
mkdir -p "$LOG"
step host-packages host_setup
step debootstrap make_root
step install as_user 'make install && cat transcriber/native/build.json'
step doctor as_user '.venv/bin/transcribe doctor'
step jfk-offline unshare -n chroot --userspec=user:user "$ROOT" env -i HOME=/home/user PATH=/usr/bin:/bin \
  QEMU_CPU="$CPU" bash -c 'cd ~/transcriber && .venv/bin/transcribe examples/jfk.flac -f txt -o /tmp/jfk && cat /tmp/jfk/jfk.txt'
step native-tests as_user '.venv/bin/pip install -q pytest && .venv/bin/python -m pytest -q -p no:cacheprovider tests/native/test_native.py tests/native/test_native_fallback.py'

echo
echo "aarch64 under qemu-aarch64 $(qemu-aarch64-static --version | head -1 | awk '{print $3}') (-cpu $CPU), Debian bookworm arm64, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%s\n' "${SUMMARY[@]}"
grep -m1 "^native kernels" "$LOG/doctor.log" || echo "native kernels: ?"
grep -m1 "^BLAS" "$LOG/doctor.log" || echo "BLAS: ?"
echo "jfk: $(tail -2 "$LOG/jfk-offline.log" | tr '\n' ' ')"
echo "logs: $LOG/"
