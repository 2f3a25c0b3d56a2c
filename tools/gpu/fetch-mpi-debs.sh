#!/usr/bin/env bash
# Run on your own (CPU, Debian 12 amd64, root or apt-capable) machine, in the project's root, AFTER
# ../shared/gpu/fetch-debs.sh. Fills .gpu/mpi-debs/ with Open MPI's Debian packages (enough to
# compile with mpicc and to run mpirun on one host over shared memory) plus the closure of their
# shared-library dependencies, and copies mpi-setup.sh to .gpu/mpi-setup.sh. On the GPU machine:
#   source .gpu/setup.sh && source .gpu/mpi-setup.sh
# .gpu/ is ignored by git; name it in the device run's `carry` list.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(git rev-parse --show-toplevel)
cd "$root"
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
[ -d .gpu ] || { echo "run ../shared/gpu/fetch-debs.sh first (.gpu/ is missing)" >&2; exit 1; }
mkdir -p .gpu/mpi-debs
cp "$here/mpi-setup.sh" .gpu/mpi-setup.sh
chmod +x .gpu/mpi-setup.sh
[ -n "$(ls /var/lib/apt/lists/ 2>/dev/null | grep -v lock | head -1)" ] || apt-get update -qq

roots="openmpi-bin libopenmpi-dev libopenmpi3 openmpi-common"
# Not carried, and not recursed into: the C runtime and toolchain that any image with gcc has (mixing a
# foreign libc/libstdc++ into LD_LIBRARY_PATH would break the host's own programs), tools and scripts
# (perl, dpkg, debconf, adduser, ssh: mpirun is told not to use ssh), headers of the dependencies
# (mpi.h needs none of them; -dev packages only serve static linking), jQuery docs, and
# libhwloc-plugins (optional dlopen'ed hwloc plugins, found only at their compiled-in /usr path; its
# OpenCL/GL plugins would pull X11 and start GPU drivers in every rank).
skip='^(libc6|libc6-dev|libc-dev-bin|libcrypt1|libgcc-s1|libstdc\+\+6|zlib1g|gcc(-[0-9]+)?(-base)?|cpp(-[0-9]+)?|g\+\+(-[0-9]+)?|gfortran(-[0-9]+)?|flang-[0-9]+|binutils.*|perl|perl-base|perl-modules-.*|libperl.*|dpkg|debconf|debianutils|tar|adduser|passwd|libpam.*|openssh-client|libjs-.*|libhwloc-plugins|.*-dev)$'
keep_anyway='^(libopenmpi-dev)$'

# Depends/Pre-Depends of one package; of an "a | b" group only the first member; a virtual package
# stands for its first provider; other architectures (pkg:arm64) are dropped.
deps_of() {
  apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
      --no-enhances "$1" 2>/dev/null |
  awk 'NR > 1 && /^ ?[ |](Pre)?Depends:/ { n = $2; skip = prev; prev = ($1 ~ /^\|/); pend = 0
         if (!skip) { if (n ~ /^</) pend = 1; else print n }; next }
       /^    / { if (pend) { print $1; pend = 0 } }' | grep -v ':' || true
}
declare -A seen
queue=$roots
while [ -n "${queue// /}" ]; do
  set -- $queue; p=$1; shift; queue="$*"
  [ -n "${seen[$p]:-}" ] && continue
  if [[ $p =~ $skip ]] && ! [[ $p =~ $keep_anyway ]]; then continue; fi
  seen[$p]=1
  for d in $(deps_of "$p"); do [ -z "${seen[$d]:-}" ] && queue="$queue $d"; done
done
pkgs=$(printf '%s\n' "${!seen[@]}" | sort | tr '\n' ' ')
echo "packages: $pkgs"
( cd .gpu/mpi-debs && rm -f ./*.deb && apt-get download $pkgs 2>&1 | grep -v '^W: Download is performed unsandboxed' || true )
n=$(ls .gpu/mpi-debs/*.deb | wc -l)
[ "$n" -eq "$(echo $pkgs | wc -w)" ] || { echo "expected $(echo $pkgs | wc -w) .deb files, got $n" >&2; exit 1; }
# Debian 12's libevent (needed by libopen-pal, libpmix) calls arc4random, so needs glibc 2.36; the GPU
# image may be older (e.g. Ubuntu 22.04, glibc 2.35). Debian 11's build of the same libevent 2.1.12
# (same soname, ABI) needs glibc 2.25; mpi-setup.sh unpacks it over the other where glibc < 2.36.
# Debian 11 is not in this machine's apt sources, so fetch the two files from the archive's pool.
mkdir -p .gpu/mpi-debs/compat
( cd .gpu/mpi-debs/compat && rm -f ./*.deb
  pool=http://deb.debian.org/debian/pool/main/libe/libevent
  while read -r sum f; do
    curl -fsSLO "$pool/$f"
    echo "$sum  $f" | sha256sum -c --quiet -
  done <<'SUMS'
4885b583bc2422021d828aea19b1da61987456716f608caff86406dc44815fd7 libevent-core-2.1-7_2.1.12-stable-1_amd64.deb
c3eb7512a9225510e7400d444a302bc98ce7ff15201a7efd2277fa105668966b libevent-pthreads-2.1-7_2.1.12-stable-1_amd64.deb
SUMS
)
ls .gpu/mpi-debs .gpu/mpi-debs/compat
du -sh .gpu/mpi-debs
du -sh .gpu
