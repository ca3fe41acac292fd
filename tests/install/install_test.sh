#!/bin/bash
# tests/install/install_test.sh BUILD_DIR SOURCE_DIR: Ferry as a user gets it.
# Installs the build into a scratch root (meson install --destdir), then,
# with nothing but what was installed and pkg-config:
#   1. the installed files: libferry (shared with soname, and static),
#      libferry-testing, ferry.pc, ferry-testing.pc, the public headers only,
#      ferry-sim and ferry-bench;
#   2. every installed header compiles on its own;
#   3. the shared libraries export only the public API (scripts/check-exports;
#      and the check itself catches a planted internal symbol);
#   4. examples/ build OUT OF TREE with `pkg-config --cflags --libs ferry`
#      (ferry-testing for the simulated one) and run: the SimCluster test
#      passes, the variant that ignores FAILED fails with its message, and
#      the real-verbs example fails cleanly where there is no RDMA device.
# Prints "install: PASS" when all hold; exits 1 at the first failure. With
# INSTALL_TEST_OUT=DIR the built transfer example and the installed library
# folder are copied to DIR/transfer and DIR/lib (tests/softroce runs them on
# rxe).
set -uo pipefail
build=$(realpath "$1"); src=$(realpath "$2")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "install: FAIL: $*" >&2; exit 1; }

meson install -C "$build" --destdir "$tmp/root" --no-rebuild --quiet >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "meson install"; }
opt() { meson introspect "$build" --buildoptions |
  python3 -c "import json,sys; print([o['value'] for o in json.load(sys.stdin) if o['name']=='$1'][0])"; }
prefix=$(opt prefix); libdir=$(opt libdir); incdir=$(opt includedir); bindir=$(opt bindir)
[[ $libdir == /* ]] || libdir="$prefix/$libdir"
[[ $incdir == /* ]] || incdir="$prefix/$incdir"
[[ $bindir == /* ]] || bindir="$prefix/$bindir"
root="$tmp/root"
export PKG_CONFIG_SYSROOT_DIR="$root" PKG_CONFIG_PATH="$root$libdir/pkgconfig"
export LD_LIBRARY_PATH="$root$libdir"

# 1. what is installed
for f in "$libdir/libferry.so.0.1.0" "$libdir/libferry.so.0" "$libdir/libferry.a" \
         "$libdir/libferry-testing.so.0" "$libdir/pkgconfig/ferry.pc" \
         "$libdir/pkgconfig/ferry-testing.pc" "$bindir/ferry-sim" "$bindir/ferry-bench"; do
  [[ -e $root$f ]] || fail "not installed: $f"
done
soname=$(readelf -d "$root$libdir/libferry.so.0.1.0" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[[ $soname == libferry.so.0 ]] || fail "soname is '$soname', want libferry.so.0"
headers=$(cd "$root$incdir" && find . -type f | sort | tr '\n' ' ')
want="./ferry/config.h ./ferry/engine.h ./ferry/export.h ./ferry/testing.h ./ferry/types.h "
[[ $headers == "$want" ]] || fail "installed headers are: $headers (want: $want)"
echo "installed: libferry.so (soname $soname), libferry.a, libferry-testing.so, ferry.pc, ferry-testing.pc, headers: $headers"
pkg-config --exists ferry ferry-testing || fail "pkg-config does not find ferry / ferry-testing"
echo "pkg-config ferry: $(pkg-config --cflags --libs ferry)"

# 2. each installed header alone
for h in config engine export testing types; do
  echo "#include <ferry/$h.h>" | c++ -std=c++20 -fsyntax-only -Wall -Werror -x c++ - \
    $(pkg-config --cflags ferry) 2>"$tmp/h.log" || { cat "$tmp/h.log"; fail "ferry/$h.h does not compile alone"; }
done
echo "headers: each compiles alone against the installed tree"

# 3. exports
python3 "$src/scripts/check-exports" "$root$libdir/libferry.so.0" "$root$libdir/libferry-testing.so.0" ||
  fail "internal symbols exported"
echo 'namespace ferry::engine { int Leaked() { return 1; } }' >"$tmp/leak.cc"
c++ -shared -fPIC -o "$tmp/libleak.so" "$tmp/leak.cc"
out=$(python3 "$src/scripts/check-exports" "$tmp/libleak.so") && fail "check-exports missed a planted leak"
grep -q 'exports an internal symbol: ferry::engine::Leaked()' <<<"$out" ||
  fail "check-exports did not name the planted symbol: $out"
echo "exports: public API only (and a planted internal symbol is caught)"

# 4. the examples, out of tree
cp "$src/examples/"*.cc "$tmp/"
cd "$tmp"
c++ -std=c++20 -O1 -o transfer transfer.cc $(pkg-config --cflags --libs ferry) || fail "build transfer"
c++ -std=c++20 -O1 -o sim_fault_test sim_fault_test.cc $(pkg-config --cflags --libs ferry-testing) ||
  fail "build sim_fault_test"
c++ -std=c++20 -O1 -DEXAMPLE_IGNORES_FAILED -o sim_fault_test_buggy sim_fault_test.cc \
  $(pkg-config --cflags --libs ferry-testing) || fail "build sim_fault_test_buggy"
echo "examples: built out of tree with pkg-config only"
./sim_fault_test >good.log 2>&1; rc=$?
cat good.log
((rc == 0)) || fail "sim_fault_test: exit $rc"
./sim_fault_test_buggy >bad.log 2>&1; rc=$?
cat bad.log
((rc == 1)) || fail "sim_fault_test_buggy: exit $rc, want 1"
grep -q '^FAIL peer link down: CopyToPeer reported success, but the bytes did not land$' bad.log ||
  fail "sim_fault_test_buggy did not fail for the ignored FAILED"
if ! ls /sys/class/infiniband/* >/dev/null 2>&1; then
  ./transfer initiator 127.0.0.1:0 127.0.0.1:1 >real.log 2>&1; rc=$?
  cat real.log
  ((rc == 1)) && grep -q 'no RDMA device' real.log || fail "transfer without a device: exit $rc"
fi
if [[ -n ${INSTALL_TEST_OUT:-} ]]; then
  mkdir -p "$INSTALL_TEST_OUT/lib" && cp transfer "$INSTALL_TEST_OUT/" &&
    cp -a "$root$libdir/." "$INSTALL_TEST_OUT/lib/" || fail "copy to $INSTALL_TEST_OUT"
fi
echo "install: PASS"
