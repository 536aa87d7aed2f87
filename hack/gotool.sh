# Sourced by the build.sh of each Go tool under hack/ (kube-state-metrics, promtool, kstatus,
# helm3): one way to build a command of the Go module pinned beside that build.sh into $BIN_DIR
# (default: <repo>/.cache/bin), cached like the control plane: rebuilt only when the module's
# go.mod, go.sum, its build.sh, this file or the extra inputs named change.
#
#   go_tool NAME PACKAGE [LDFLAGS [TAGS]] [-- EXTRA_INPUTS...]
#
# Run from the module's directory. LDFLAGS are added to -s -w; TAGS are go build tags. `--` ends
# the positional arguments wherever it comes (after PACKAGE, LDFLAGS or TAGS).

# The version of a module the go.mod of the current directory requires (controlplane/build.sh
# sources this file for it too).
module_version() { go list -m -f '{{.Version}}' "$1"; }

go_tool() {
  local args=()
  while (($#)) && [[ $1 != -- ]]; do args+=("$1"); shift; done
  (($#)) && shift # the --: what follows are extra inputs
  if ((${#args[@]} < 2 || ${#args[@]} > 4)); then
    echo "usage: go_tool NAME PACKAGE [LDFLAGS [TAGS]] [-- EXTRA_INPUTS...]" >&2
    return 2
  fi
  local name=${args[0]} package=${args[1]} ldflags=${args[2]:-} tags=${args[3]:-}
  local repo bin_dir stamp_file stamp start
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  bin_dir=${BIN_DIR:-$repo/.cache/bin}
  stamp_file=$bin_dir/.stamp-$name
  stamp=$(cat go.mod go.sum build.sh "${BASH_SOURCE[0]}" "$@" | sha256sum | cut -d' ' -f1)
  if [[ -f $stamp_file && $(cat "$stamp_file") == "$stamp" && -x $bin_dir/$name ]]; then
    echo "$name is up to date in $bin_dir"
    return 0
  fi
  echo "building $name ($package) into $bin_dir"
  start=$SECONDS
  mkdir -p "$bin_dir"
  CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath ${tags:+-tags "$tags"} \
    -ldflags "-s -w $ldflags" -o "$bin_dir/$name" "$package"
  echo "$stamp" >"$stamp_file"
  echo "built $name in $((SECONDS - start)) s"
}
