#!/usr/bin/env bash
# The two base images `make image` builds the Dockerfile on, made here from Debian bookworm's
# packages by mmdebstrap because no registry can be reached from these machines. Each is the local
# stand-in of the Dockerfile's public default (docs/design-notes.md, "Ready for a real cluster"):
#   build    python3 and pip on an Essential:yes system (the stand-in for python:3.11-slim-bookworm)
#   runtime  python3.11 and its libraries only, unpacked without maintainer scripts, no shell, no
#            package manager, a nonroot user 65532 (the stand-in for distroless python3-debian12)
# Prints the two image names. Each is rebuilt only when this script changes (its hash is the tag).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=$here/../../.cache/image/base
buildah=$here/buildah
tag=$(cat "$here/bases.sh" "$here/runtime-hook.sh" | sha256sum | cut -c1-12)
suite=bookworm

# Documentation, manuals and translations are of no use in an image; licences stay.
slim=(
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*'
)

ensure() {  # NAME MMDEBSTRAP-ARGS...: the image localhost/cronlease-NAME-base:TAG, made if missing
  local name=$1 image=localhost/cronlease-$1-base:$tag tar=$cache/$1-$tag.tar
  shift
  if ! "$buildah" inspect --type image "$image" >/dev/null 2>&1; then
    if [[ ! -f $tar ]]; then
      mkdir -p "$cache"
      rm -f "$cache/$name"-*.tar  # made by older versions of this script
      echo "making $image with mmdebstrap (Debian $suite)" >&2
      mmdebstrap --quiet --format=tar "$@" "$suite" "$tar.tmp" >&2
      mv "$tar.tmp" "$tar"
    fi
    local container
    container=$("$buildah" from scratch)
    "$buildah" add --quiet "$container" "$tar" / >/dev/null
    "$buildah" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --label "org.opencontainers.image.description=cronlease $name base: Debian $suite" \
      "$container"
    "$buildah" commit --quiet --rm "$container" "$image" >/dev/null
  fi
  echo "$image"
}

ensure build --variant=essential --include=python3-pip "${slim[@]}"
ensure runtime --variant=extract --include=python3.11-minimal,libpython3.11-stdlib,install-info \
  --extract-hook="$here/runtime-hook.sh"
