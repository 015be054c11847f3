# bench/peerlibs.sh: sourced by the benchmark scripts that run programs under
# each malloc (idle_threads.sh, instr.sh, peers.sh, realprog.sh). The peers'
# libraries where Debian installs them, and the packages that install them;
# glibc is the empty library (no LD_PRELOAD). The scripts add uslab's own
# entries.
MULTIARCH=$(gcc -print-multiarch 2>/dev/null || true)
LIBDIR=/usr/lib/${MULTIARCH:-x86_64-linux-gnu}
declare -A LIB PKG
LIB[glibc]=""
LIB[jemalloc]=$LIBDIR/libjemalloc.so.2;          PKG[jemalloc]=libjemalloc2
LIB[tcmalloc]=$LIBDIR/libtcmalloc_minimal.so.4;  PKG[tcmalloc]=libtcmalloc-minimal4
LIB[mimalloc]=$LIBDIR/libmimalloc.so.2;          PKG[mimalloc]=libmimalloc2.0
