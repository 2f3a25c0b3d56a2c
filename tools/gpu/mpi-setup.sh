#!/usr/bin/env bash
# Run on the GPU machine, from the project's root, AFTER .gpu/setup.sh, as:
#   source .gpu/setup.sh && source .gpu/mpi-setup.sh
# Unpacks .gpu/mpi-debs (Debian 12's Open MPI 4.1 and its libraries; see tools/gpu/fetch-mpi-debs.sh)
# into /opt/gpudeps-mpi (never into /), repairs what unpacking outside / breaks (compiled-in /usr
# prefix, alternatives symlinks, .pc prefixes), and exports what mpicc, mpirun, pkg-config and the
# loader need to compile and run MPI programs as root, on this one host, over shared memory.
# It is sourced: it sets no shell options and exits nothing; set MPI_SETUP_QUIET=1 to silence it.
_M=/opt/gpudeps-mpi
_D=${MPI_DEBS_DIR:-.gpu/mpi-debs}
_A=$_M/usr/lib/x86_64-linux-gnu
_L=$_M/lib/x86_64-linux-gnu   # some Debian 12 packages (libnl) still ship under /lib
_O=$_A/openmpi
_P=$_A/pmix2
_log() { [ -n "${MPI_SETUP_QUIET:-}" ] || echo "mpi-setup: $*" >&2; }

if [ ! -e $_M/usr/bin/orterun ]; then
  if ! ls "$_D"/*.deb >/dev/null 2>&1; then
    _log "no .deb files in $_D (run tools/gpu/fetch-mpi-debs.sh on the CPU machine and carry .gpu)"
  else
    mkdir -p $_M
    _unpack() {   # dpkg -x, or ar + tar where dpkg is missing
      if command -v dpkg >/dev/null; then dpkg -x "$1" $_M
      else ( _t=$(mktemp -d) && cd "$_t" && ar x "$1" && tar -xf data.tar.* -C $_M; rm -rf "$_t" ); fi
    }
    for _f in "$_D"/*.deb; do _unpack "$(readlink -f "$_f")"; done
    # Debian 12's libevent calls arc4random (glibc 2.36); below that, use Debian 11's build of the
    # same libevent 2.1.12 (same soname and ABI), which needs glibc 2.25.
    _glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
    if [ -n "$_glibc" ] && [ "$(printf '%s\n' 2.36 "$_glibc" | sort -V | head -1)" != 2.36 ]; then
      _log "glibc $_glibc < 2.36: using the libevent build for older glibc"
      for _f in "$_D"/compat/*.deb; do if [ -e "$_f" ]; then _unpack "$(readlink -f "$_f")"; fi; done
    fi
    # Base-system libraries carried only in case the image lacks them: where the host has its own
    # copy, drop ours so that LD_LIBRARY_PATH does not put an older one in front of the host's.
    for _so in libudev.so.1 libuuid.so.1 libatomic.so.1; do
      if ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$_so "; then rm -f $_A/${_so}* $_L/${_so}*; fi
    done
    # Debian's PMIx params file names its plugin dir by absolute path
    sed -i "s|/usr/lib/x86_64-linux-gnu/pmix2|$_P|g" $_P/share/pmix-mca-params.conf 2>/dev/null || true
    # .pc files carry prefix=/usr
    find $_M -type f -name '*.pc' -exec sed -i "s|^prefix=/usr|prefix=$_M/usr|" {} +
    # what the maintainer scripts' update-alternatives would have made (paths relative, inside $_M)
    _ln() { [ -e "$2" ] || [ -L "$2" ] || ln -s "$1" "$2"; }
    _ln mpicc.openmpi   $_M/usr/bin/mpicc
    _ln mpic++.openmpi  $_M/usr/bin/mpic++
    _ln mpic++.openmpi  $_M/usr/bin/mpicxx
    _ln mpirun.openmpi  $_M/usr/bin/mpirun
    _ln mpiexec.openmpi $_M/usr/bin/mpiexec
    mkdir -p $_M/usr/include/x86_64-linux-gnu $_A/pkgconfig
    _ln ../../lib/x86_64-linux-gnu/openmpi/include $_M/usr/include/x86_64-linux-gnu/mpi
    _ln openmpi/lib/libmpi.so $_A/libmpi.so
    _ln ompi.pc   $_A/pkgconfig/mpi.pc
    _ln ompi-c.pc $_A/pkgconfig/mpi-c.pc
    _ln ompi-cxx.pc $_A/pkgconfig/mpi-cxx.pc
    if [ -e $_M/usr/lib/libpsm1/libpsm_infinipath.so.1.16 ]; then
      _ln ../libpsm1/libpsm_infinipath.so.1.16 $_A/libpsm_infinipath.so.1; fi
    unset -f _unpack _ln
  fi
fi

if [ -e $_M/usr/bin/orterun ]; then
  # Open MPI was built with prefix /usr and sysconfdir /etc/openmpi; OPAL_PREFIX moves bindir,
  # libdir, the plugin dir (openmpi/lib/openmpi3), pkgdatadir (help texts, mpicc's wrapper data),
  # and the include dir mpicc passes. PMIx was configured with prefix /usr/lib/x86_64-linux-gnu/pmix2
  # and literal libdir (its plugins: lib/pmix), sysconfdir/datadir (share: its mca-params.conf and
  # help texts) and includedir, so each gets its own variable.
  export OPAL_PREFIX=$_M/usr
  export OPAL_SYSCONFDIR=$_M/etc/openmpi
  export PMIX_PREFIX=$_P PMIX_EXEC_PREFIX=$_P PMIX_LIBDIR=$_P/lib PMIX_INCLUDEDIR=$_P/include
  export PMIX_SYSCONFDIR=$_P/share PMIX_DATADIR=$_P/share PMIX_PKGDATADIR=$_P/share/pmix
  export PMIX_PKGLIBDIR=$_P/lib/pmix
  export PATH=$_M/usr/bin:$PATH
  export LD_LIBRARY_PATH=$_A:$_L:$_O/lib:$_P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LIBRARY_PATH=$_A:$_L:$_O/lib${LIBRARY_PATH:+:$LIBRARY_PATH}
  export C_INCLUDE_PATH=$_O/include${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}
  export CPLUS_INCLUDE_PATH=$_O/include${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}
  export PKG_CONFIG_PATH=$_A/pkgconfig:$_O/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  # one host, as root, in a container: no ssh, no RDMA/UCX, shared memory only, oversubscription OK
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_plm=isolated OMPI_MCA_plm_rsh_agent=false
  export OMPI_MCA_rmaps_base_oversubscribe=1
  export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_osc=^ucx,pt2pt OMPI_MCA_mtl=^ofi
  export OMPI_MCA_btl_vader_single_copy_mechanism=none   # CMA needs ptrace rights containers lack
  export OMPI_MCA_btl_base_warn_component_unused=0
  export PMIX_MCA_gds=hash
  # PMIx 4 (mpirun <-> ranks) talks TCP over 127.0.0.1: an image whose loopback is down fails with
  # "The PMIx server's listener thread failed to start".
  if [ -r /sys/class/net/lo/flags ] && [ $(( $(cat /sys/class/net/lo/flags) & 1 )) -eq 0 ]; then
    if command -v ip >/dev/null && ip link set lo up 2>/dev/null; then _log "brought the loopback interface up"
    else _log "WARNING: loopback interface is down and could not be brought up; mpirun will fail"; fi
  fi
  if ! { [ -d /dev/shm ] && [ -w /dev/shm ]; }; then export OMPI_MCA_btl_vader_backing_directory=/tmp; fi
  _log "Open MPI $(sed -n 's/^version=//p' $_M/usr/share/openmpi/mpicc-wrapper-data.txt) in $_M: $(command -v mpicc), $(command -v mpirun)"
fi
unset _M _D _A _L _O _P _f _so _glibc
unset -f _log
