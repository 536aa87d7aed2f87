#!/usr/bin/env bash
# `make image`: the operator image from the project's Dockerfile, built by buildah (no Docker
# engine here) into .cache/image/cronlease-<version>.oci.tar, tagged localhost/cronlease:<version>.
# Builds here reach no registry, so (docs/design-notes.md, "Ready for a real cluster"):
#  - the Dockerfile's base images are local stand-ins made from Debian's packages (bases.sh);
#  - the wheels of the project and of its declared dependencies are fetched here, for the image's
#    Python and platform, and replace the Dockerfile's `wheels` stage (--build-context).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
buildah=$here/buildah
python=${PYTHON:-python3}
cd "$repo"
start=$SECONDS

version=$("$python" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
out=.cache/image/cronlease-$version.oci.tar
image=localhost/cronlease:$version
mkdir -p .cache/image
{ read -r build_base; read -r runtime_base; } < <(bash "$here/bases.sh")

# The same inputs as the Dockerfile's wheels stage, copied so that building leaves nothing behind.
dist=.cache/image/dist
rm -rf "$dist" && mkdir -p "$dist/src" "$dist/wheels"
cp -r pyproject.toml README.md LICENSE operator "$dist/src/"
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$dist/wheels" "$dist/src"
# Binary wheels for the image's CPython 3.11 on glibc 2.36 (bookworm), whatever Python runs this
# (pip takes each compatible manylinux tag as its own --platform).
platforms=()
for minor in {36..17}; do platforms+=(--platform "manylinux_2_${minor}_$(uname -m)"); done
"$python" -m pip download --quiet --only-binary=:all: --implementation cp --python-version 3.11 \
  --abi cp311 "${platforms[@]}" --dest "$dist/wheels" "$dist"/wheels/cronlease-*.whl
rm -rf "$dist/src"

"$buildah" build --quiet --pull=false --file Dockerfile --tag "$image" \
  --build-arg BUILD_IMAGE="$build_base" --build-arg RUNTIME_IMAGE="$runtime_base" \
  --build-arg VERSION="$version" --build-context wheels="$dist" . >/dev/null
rm -f "$out.tmp"
"$buildah" push --quiet "$image" "oci-archive:$out.tmp:cronlease:$version"
mv "$out.tmp" "$out"
"$buildah" rmi --prune >/dev/null 2>&1 || true  # earlier builds' images, now untagged
size=$("$buildah" images --format '{{.Size}}' "$image")
echo "built $image ($size) into $out ($(du -h "$out" | cut -f1)) in $((SECONDS - start)) s"
