#!/usr/bin/env bash
# check_install.sh BUILD_DIR LIBDIR CONSUMER_DIR RUN_LAYERS_C FP4CL_CLI IN_TREE_RUN_LAYERS FP4CL_H
# Installs the build into a temporary prefix and builds and runs outside projects against it
# (see CMakeLists.txt). Exits non-zero with a message on the first failure.
set -euo pipefail
build=$1 libdir=$2 consumer=$3 run_layers_c=$4 cli=$5 in_tree=$6 header=$7
cmake_cmd=${CMAKE_COMMAND:-cmake}
work=$(mktemp -d "${TMPDIR:-/tmp}/fp4cl-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "check_install: $*" >&2; exit 1; }

echo "== cmake --install into $prefix"
"$cmake_cmd" --install "$build" --prefix "$prefix" > "$work/install.log"
for f in include/fp4cl/fp4cl.h include/fp4cl/linear.hpp include/fp4cl/moe.hpp "$libdir/libfp4cl.so" \
         "$libdir/cmake/fp4cl/fp4cl-config.cmake" "$libdir/cmake/fp4cl/fp4cl-config-version.cmake" \
         "$libdir/cmake/fp4cl/fp4cl-targets.cmake" "$libdir/pkgconfig/fp4cl.pc"; do
  [ -e "$prefix/$f" ] || fail "missing after install: $f"
done
[ ! -e "$prefix/$libdir/libfp4cl.a" ] || fail "the static library is installed"
soname=$(readelf -d "$prefix/$libdir/libfp4cl.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ -n "$soname" ] || fail "libfp4cl.so has no SONAME"
[ -e "$prefix/$libdir/$soname" ] || fail "no $soname (the SONAME link) in $libdir"
echo "SONAME $soname"

echo "== exported symbols"
nm -D --defined-only "$prefix/$libdir/libfp4cl.so" | awk '{print $3}' | sed 's/@.*//' | sort -u > "$work/exports"
grep -oE 'FP4CL_API [^(]*\bfp4cl_[a-z0-9_]+\(' "$header" | grep -oE 'fp4cl_[a-z0-9_]+\($' | tr -d '(' | sort -u \
  > "$work/declared"
[ "$(wc -l < "$work/declared")" -ge 30 ] || fail "found only $(wc -l < "$work/declared") functions in $header"
missing=$(comm -23 "$work/declared" "$work/exports")
[ -z "$missing" ] || fail "declared in fp4cl.h but not exported: $missing"
c_exports=$(grep -c '^fp4cl_' "$work/exports" || true)
[ "$c_exports" -eq "$(wc -l < "$work/declared")" ] || fail "exports $c_exports fp4cl_* symbols, fp4cl.h declares $(wc -l < "$work/declared")"
# Everything else must be fp4cl's public C++ API: no internals, no fmt/nlohmann/std instantiations.
grep -v '^fp4cl_' "$work/exports" | c++filt > "$work/cxx_exports"
stray=$(grep -vE '^(fp4cl::|typeinfo for fp4cl::Error|typeinfo name for fp4cl::Error|vtable for fp4cl::Error|FP4CL_)' \
        "$work/cxx_exports" || true)
[ -z "$stray" ] || fail "exports symbols outside the API: $(echo "$stray" | head -5)"
for internal in 'fp4cl::detail::' 'fp4cl::fail' 'fp4cl::capi::' 'fp4cl::MoeRouter' 'fp4cl::log::' 'fp4cl::reference::'; do
  ! grep -q "^$internal" "$work/cxx_exports" || fail "exports internal symbols $internal"
done
for api in 'fp4cl::Context::create' 'fp4cl::Checkpoint::open' 'fp4cl::Linear::from_checkpoint' \
           'fp4cl::MoeLayer::from_checkpoint' 'fp4cl::MoeLogitRouting::from_checkpoint' 'fp4cl::Checkpoint::load_mlp' \
           'fp4cl::select_device'; do
  grep -q "^$api" "$work/cxx_exports" || fail "does not export $api"
done
echo "$c_exports C functions, $(wc -l < "$work/cxx_exports") C++ API symbols, nothing else"

echo "== a checkpoint from the fp4cl CLI"
"$cli" make-model "$work/source" --layers 1 --hidden 64 --inter 32 --experts 4 --topk 2 --heads 2 --kv-heads 1 \
  --head-dim 32 --vocab 128 > /dev/null
"$cli" quantize "$work/source" "$work/model" --scheme nvfp4 --layout compressed-tensors > /dev/null
mkdir "$work/out_in_tree" "$work/out_cmake" "$work/out_pkgconfig"
"$in_tree" "$work/model" "$work/out_in_tree" > /dev/null

echo "== outside CMake project (find_package(fp4cl CONFIG))"
"$cmake_cmd" -S "$consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DRUN_LAYERS_SOURCE="$run_layers_c" \
  -DCMAKE_BUILD_TYPE=Release > "$work/consumer.log" 2>&1 || { cat "$work/consumer.log"; fail "configuring the consumer"; }
"$cmake_cmd" --build "$work/consumer" -j2 >> "$work/consumer.log" 2>&1 || { cat "$work/consumer.log"; fail "building the consumer"; }
"$work/consumer/run_layers_c" "$work/model" "$work/out_cmake"
"$work/consumer/cpp_consumer" "$work/model"
ldd_out=$(ldd "$work/consumer/run_layers_c")  # not piped into grep -q: with pipefail, ldd killed by SIGPIPE failed the check at random
grep -qF "$prefix/$libdir/$soname" <<<"$ldd_out" || fail "run_layers_c does not load the installed $soname"

echo "== outside pkg-config build (cc \$(pkg-config --cflags --libs fp4cl))"
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
[ "$(pkg-config --modversion fp4cl)" = "$(sed -n 's/^Version: //p' "$prefix/$libdir/pkgconfig/fp4cl.pc")" ] || fail "pkg-config --modversion"
${CC:-cc} -std=c99 -Wall -Wextra -Werror -o "$work/run_layers_pc" "$run_layers_c" $(pkg-config --cflags --libs fp4cl) \
  -Wl,-rpath,"$(pkg-config --variable=libdir fp4cl)"
"$work/run_layers_pc" "$work/model" "$work/out_pkgconfig" > /dev/null

echo "== the installed tree moved elsewhere (relocatable pkg-config file)"
mv "$prefix" "$work/moved"
export PKG_CONFIG_PATH="$work/moved/$libdir/pkgconfig"
[ "$(pkg-config --variable=libdir fp4cl)" -ef "$work/moved/$libdir" ] || fail "fp4cl.pc does not follow the moved prefix"
${CC:-cc} -std=c99 -o "$work/run_layers_moved" "$run_layers_c" $(pkg-config --cflags --libs fp4cl) \
  -Wl,-rpath,"$(pkg-config --variable=libdir fp4cl)"
mkdir "$work/out_moved"
"$work/run_layers_moved" "$work/model" "$work/out_moved" > /dev/null

echo "== outputs of the four builds"
for f in layers.txt linear_x.bin linear_y.bin moe_x.bin moe_ids.bin moe_weights.bin moe_out.bin; do
  cmp "$work/out_in_tree/$f" "$work/out_cmake/$f" || fail "$f differs between the in-tree and the CMake consumer build"
  cmp "$work/out_in_tree/$f" "$work/out_pkgconfig/$f" || fail "$f differs between the in-tree and the pkg-config build"
  cmp "$work/out_in_tree/$f" "$work/out_moved/$f" || fail "$f differs between the in-tree and the moved-prefix build"
done
echo "install_package: OK"
