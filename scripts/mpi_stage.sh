#!/usr/bin/env bash
# Stages a relocatable Open MPI runtime (from this host's Debian/Ubuntu packages) and an anelab binary into an
# ignored folder, for a machine without MPI (the 16-core device machine of docs/training.md's scaling table):
#   scripts/mpi_stage.sh BINARY [OUT=.devbin/mpi]
# OUT/env.sh sets OPAL_PREFIX (Open MPI finds its plugins and help files under it), PMIX_INSTALL_PREFIX,
# LD_LIBRARY_PATH and PATH; OUT/bin holds mpirun and anelab, OUT/lib the non-glibc libraries they need.
set -euo pipefail
BIN="${1:?usage: scripts/mpi_stage.sh BINARY [OUT]}"
OUT="${2:-.devbin/mpi}"
ARCH=$(gcc -print-multiarch)
OMPI=/usr/lib/$ARCH/openmpi PMIX=/usr/lib/$ARCH/pmix2
[[ -d $OMPI/lib/openmpi3 ]] || { echo "[mpi_stage] no Open MPI under $OMPI (Debian: openmpi-bin libopenmpi-dev)" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib" "$OUT/lib/$ARCH/openmpi/lib" "$OUT/share" "$OUT/pmix2/lib" "$OUT/pmix2/share"
cp -L "$(command -v orterun)" "$OUT/bin/mpirun"
cp -L "$BIN" "$OUT/bin/anelab"
cp -rL "$OMPI/lib/openmpi3" "$OUT/lib/$ARCH/openmpi/lib/"   # OPAL_PREFIX/lib/<arch>/openmpi/lib/openmpi3: the plugins
cp -rL /usr/share/openmpi "$OUT/share/"                     # help texts
[[ -d $PMIX/lib/pmix ]] && cp -rL "$PMIX/lib/pmix" "$OUT/pmix2/lib/" && cp -rL /usr/lib/$ARCH/pmix2/share/pmix "$OUT/pmix2/share/"
# every shared library of the binaries and plugins except glibc's own (the target has a glibc at least as new)
for f in "$OUT"/bin/* "$OUT"/lib/$ARCH/openmpi/lib/openmpi3/*.so "$OUT"/pmix2/lib/pmix/*.so; do
  ldd "$f" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libresolv.so.*|libstdc++.so.*|libgcc_s.so.*) ;;
    *) cp -L "$lib" "$OUT/lib/" ;;
  esac
done
cat >"$OUT/env.sh" <<'ENV'
# source OUT/env.sh: this folder's Open MPI, for one host (shared memory between the ranks, TCP on loopback
# for the launcher), as root, more ranks than cores allowed.
B=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OPAL_PREFIX=$B PMIX_INSTALL_PREFIX=$B/pmix2 PATH=$B/bin:$PATH LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_mtl=^ofi,psm,psm2 OMPI_MCA_osc=^ucx,pt2pt
export OMPI_MCA_btl_base_warn_component_unused=0 OMPI_MCA_oob_tcp_if_include=lo PMIX_MCA_pcompress_base_silence_warning=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
ENV
echo "[mpi_stage] $OUT: $(du -sh "$OUT" | cut -f1) ($(ls "$OUT/lib" | wc -l) libraries)"
