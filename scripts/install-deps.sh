#!/usr/bin/env bash
# Installs only what is missing: Debian packages, then the npm packages pinned in
# package-lock.json. Quick when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(
  cmake ninja-build g++ make pkg-config python3 curl
  libgtest-dev libbenchmark-dev libdnnl-dev
  libopenmpi-dev openmpi-bin iproute2
  nlohmann-json3-dev libcli11-dev libpcre2-dev libicu-dev libcpp-httplib-dev libssl-dev
  libboost-dev
  libpng-dev libjpeg-dev libwebp-dev zlib1g-dev
  liblapack-dev
  clang libclang-rt-14-dev
  nodejs npm
  chromium
)

missing=()
for p in "${apt_packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
# A Node.js installed outside Debian's packages serves as well as the packaged one.
if command -v node >/dev/null && command -v npm >/dev/null; then
  tmp=()
  for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || tmp+=("$p"); done
  missing=("${tmp[@]+"${tmp[@]}"}")
fi

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  as_root=()
  [[ $(id -u) == 0 ]] || as_root=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${as_root[@]}" apt-get install -y --no-install-recommends "${missing[@]}" ||
    { "${as_root[@]}" apt-get update && "${as_root[@]}" apt-get install -y --no-install-recommends "${missing[@]}"; }
fi

# npm peers used by the tests; reinstalled only when the lockfile changed.
if [[ -f package-lock.json ]]; then
  stamp=node_modules/.mxserve-lock
  if [[ ! -f $stamp ]] || ! cmp -s package-lock.json "$stamp"; then
    echo "install-deps: npm ci"
    npm ci --no-audit --no-fund --loglevel=error
    cp package-lock.json "$stamp"
  fi
fi
