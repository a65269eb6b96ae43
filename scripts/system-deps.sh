#!/usr/bin/env bash
# Installs, from Debian's packages, whichever of the Arm toolchain, QEMU and Node.js/npm is
# missing (needs root or sudo). Installs nothing when all are present.
set -euo pipefail
missing=()
command -v arm-none-eabi-gcc >/dev/null || missing+=(gcc-arm-none-eabi libnewlib-arm-none-eabi)
command -v qemu-system-arm >/dev/null || missing+=(qemu-system-arm)
command -v npm >/dev/null || missing+=(nodejs npm)
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
echo "installing ${missing[*]} (Debian packages)"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
