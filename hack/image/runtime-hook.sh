#!/usr/bin/env bash
# mmdebstrap's extract hook for the runtime base ($1 is its root). The extract variant runs no
# maintainer script, no dpkg path filter and no customize hook, so this does by hand what the
# image needs: python3, the nonroot user of distroless, no documentation. The stdlib is compiled
# now because the read-only root filesystem cannot take .pyc files later. (install-info is in
# the package list only to satisfy readline-common's "dpkg | install-info", keeping dpkg out.)
set -euo pipefail
root=$1
ln -sf python3.11 "$root/usr/bin/python3"
printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
  'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$root/etc/passwd"
printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"$root/etc/group"
install -d -m 0700 -o 65532 -g 65532 "$root/home/nonroot"
install -d -m 0700 "$root/root"
install -d -m 1777 "$root/tmp"
find "$root/usr/share/doc" -type f ! -name copyright -delete
rm -rf "$root"/usr/share/{man,info,locale,lintian,bug} "$root"/usr/sbin/update-info-dir \
  "$root"/var/cache/apt "$root"/var/lib/apt "$root"/var/log/apt
chroot "$root" /usr/bin/python3.11 -m compileall -q -j0 \
  -x '/(test|idlelib|tkinter|lib2to3|ensurepip)/' /usr/lib/python3.11
