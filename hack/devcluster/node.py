"""A real node beside kwok's (issue 37): pods whose containers really run, for the chart's operator
and for step pods with their `cronlease heartbeat` sidecar.

containerd and runc from Debian, the kubelet and a pause program built with the control plane
(hack/controlplane), pods on a bridge from Debian's CNI plugins. The host has no registry, so the
pause image and the operator's image are imported into containerd from OCI archives. What a pod
needs to reach the API, as in a cluster: `kubernetes.default.svc` resolves (dnsmasq on the
bridge) to the kubernetes Service's IP, which is forwarded to the API server on 127.0.0.1 (a DNAT
rule and `route_localnet` on the bridge: kube-proxy's job elsewhere).

The kubelet changes the host: sysctls, iptables chains, cgroups, mounts, network namespaces.
`stop` takes every one of those back, recorded in the node's state file when they were made, so
that a node that crashed half-way is torn down as completely as one that ran.

What the machine must allow: root (network namespaces, mounts, iptables), the cgroup v1 or v2
hierarchy mounted, and the packages; `unavailable()` says which is missing. It runs containers
without CAP_SYS_RESOURCE (containerd's `restrict_oom_score_adj`, since the kubelet's OOM scores
may not be lowered here) on cgroup v1 (`failCgroupV1: false`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from devcluster import apiserver
from devcluster.image import buildah
from devcluster.kubeconfig import write_kubeconfig
from devcluster.pki import CertificateAuthority
from devcluster.processes import free_port, is_running, spawn, stop

NODE_NAME = "cronlease-node-0"
BRIDGE = "cronlease0"
SUBNET = "10.89.0.0/24"
NODE_IP = "10.89.0.1"  # the bridge's address: the node's InternalIP, DNS, the pods' gateway
PAUSE_IMAGE = "localhost/cronlease-pause:1"
NAMESPACE = "k8s.io"  # containerd's namespace for the CRI
# What the kubelet sets at start (pkg/kubelet/cm: setupKernelTunables), restored at stop.
KUBELET_SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
)
# The host's settings this node needs.
HOST_SYSCTLS = {"net.ipv4.ip_forward": "1"}
PROGRAMS = ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "dnsmasq", "iptables")
CNI_BIN = Path("/usr/lib/cni")
COMMENT = "cronlease-devcluster-node"  # marks our iptables rules


class NodeError(RuntimeError):
    """The real node could not be started or stopped; the message says where to look."""


@dataclass
class NodeState:
    """What a started node made and changed, so that `stop` can take it all back."""

    directory: str
    api_port: int
    pids: dict[str, int] = field(default_factory=dict)
    sysctls: dict[str, str] = field(default_factory=dict)  # name: value before we started
    iptables_chains: list[str] = field(default_factory=list)  # "table/chain" there before
    netns_before: list[str] = field(default_factory=list)
    dnat: list[str] = field(default_factory=list)  # our rule, as `iptables -t nat -A` takes it
    imported: dict[str, str] = field(default_factory=dict)  # archive: its sha256

    @property
    def root(self) -> Path:
        return Path(self.directory)

    @property
    def socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"


def unavailable() -> str | None:
    """Why this machine cannot run the real node, or None if it can."""
    if os.geteuid() != 0:
        return "the real node needs root (network namespaces, mounts, iptables, cgroups)"
    missing = [p for p in PROGRAMS if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]
    if missing:
        packages = "containerd runc dnsmasq-base iptables"
        return f"the real node needs {', '.join(missing)} (apt-get install {packages})"
    if not (CNI_BIN / "bridge").exists() or not (CNI_BIN / "host-local").exists():
        return (
            f"the real node needs the CNI plugins bridge and host-local in {CNI_BIN} "
            "(apt-get install containernetworking-plugins)"
        )
    if (
        not Path("/sys/fs/cgroup/memory").is_dir()
        and not Path("/sys/fs/cgroup/cgroup.controllers").exists()
    ):
        return "the real node needs a cgroup hierarchy mounted at /sys/fs/cgroup"
    return None


def state_file(cluster_dir: Path) -> Path:
    return cluster_dir / "node.json"


def load(cluster_dir: Path) -> NodeState | None:
    path = state_file(cluster_dir)
    if not path.exists():
        return None
    return NodeState(**json.loads(path.read_text()))


def _save(state: NodeState, cluster_dir: Path) -> None:
    state_file(cluster_dir).write_text(json.dumps(asdict(state), indent=2))


def running(state: NodeState) -> bool:
    return all(is_running(pid, name) for name, pid in state.pids.items())


def start(
    *,
    cluster_dir: Path,
    data_dir: Path,
    log_dir: Path,
    bins: Path,
    server: str,
    images: list[Path],
) -> NodeState:
    """Start the node and import `images` (OCI archives); returns once the kubelet started (it
    registers the Node itself)."""
    why = unavailable()
    if why:
        raise NodeError(why)
    root = data_dir / "node"
    root.mkdir(parents=True, exist_ok=True)
    state = NodeState(
        directory=str(root),
        api_port=int(server.rsplit(":", 1)[1]),
        sysctls={name: _sysctl(name) for name in (*KUBELET_SYSCTLS, *HOST_SYSCTLS)},
        iptables_chains=_chains(),
        netns_before=_netns(),
    )
    _save(state, cluster_dir)  # from here on, `stop` knows what to take back
    try:
        _network(state)
        _save(state, cluster_dir)
        state.pids["dnsmasq"] = _dnsmasq(root, log_dir).pid
        state.pids["containerd"] = _containerd(root, log_dir).pid
        _save(state, cluster_dir)
        _wait(lambda: _ctr(state, "version", check=False).returncode == 0, 30, "containerd")
        import_images(state, [pause_archive(bins), *images], cluster_dir)
        state.pids["kubelet"] = _kubelet(state, bins, server, log_dir).pid
        _save(state, cluster_dir)
    except BaseException:
        stop_node(state, cluster_dir)
        raise
    return state


def stop_node(
    state: NodeState, cluster_dir: Path, delete_pods: Callable[[], None] | None = None
) -> None:
    """Take the node down and everything it changed on the host back, whatever it got to.
    `delete_pods` deletes the node's pods from the API: the kubelet then stops them itself (the
    CNI plugin takes their network down, their volumes are unmounted), which is cleaner than
    anything done behind its back."""
    if delete_pods is not None and is_running(state.pids.get("kubelet", 0), "kubelet"):
        delete_pods()
        with contextlib.suppress(NodeError):
            _wait(lambda: not _tasks(state), 30, "the node's containers to stop")
    for name in ("kubelet", "dnsmasq"):
        if name in state.pids:
            stop(state.pids[name], name)
    if "containerd" in state.pids and is_running(state.pids["containerd"], "containerd"):
        for task in _tasks(state):
            _ctr(state, "tasks", "kill", "--signal", "SIGKILL", task, check=False)
            _ctr(state, "tasks", "delete", "--force", task, check=False)
        stop(state.pids["containerd"], "containerd")
    _kill_shims(state)
    _unmount_under(state.root)
    for ns in set(_netns()) - set(state.netns_before):
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
    subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True)
    if state.dnat:
        subprocess.run(["iptables", "-t", "nat", "-D", *state.dnat], capture_output=True)
    _remove_new_chains(set(state.iptables_chains))
    for name, value in state.sysctls.items():
        subprocess.run(["sysctl", "-q", "-w", f"{name}={value}"], capture_output=True)
    _remove_cgroups()
    shutil.rmtree(state.root, ignore_errors=True)
    state_file(cluster_dir).unlink(missing_ok=True)


def pause_archive(bins: Path) -> Path:
    """The pause image as an OCI archive, made with buildah from the pause program (once per
    build of it)."""
    program = bins / "pause"
    digest = hashlib.sha256(program.read_bytes()).hexdigest()[:12]
    archive = bins.parent / "image" / f"pause-{digest}.oci.tar"
    if archive.exists():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    container = buildah("from", "--quiet", "scratch").strip()
    try:
        buildah("copy", "--quiet", "--chmod", "0755", container, str(program), "/pause")
        buildah("config", "--entrypoint", '["/pause"]', "--user", "65535:65535", container)
        buildah("commit", "--quiet", container, f"oci-archive:{archive}:{PAUSE_IMAGE}")
    finally:
        buildah("rm", container)
    return archive


def _network(state: NodeState) -> None:
    """The bridge with the node's address, the forward of the kubernetes Service to the API."""
    for name, value in HOST_SYSCTLS.items():
        _run("sysctl", "-q", "-w", f"{name}={value}")
    _run("ip", "link", "add", BRIDGE, "type", "bridge")
    _run("ip", "addr", "add", f"{NODE_IP}/{SUBNET.split('/')[1]}", "dev", BRIDGE)
    _run("ip", "link", "set", BRIDGE, "up")
    # Packets from the pods to 127.0.0.1 after the DNAT: dropped as martians without it. Set on
    # the bridge only, and gone with it.
    _run("sysctl", "-q", "-w", f"net.ipv4.conf.{BRIDGE}.route_localnet=1")
    state.dnat = [
        "PREROUTING", "-i", BRIDGE, "-p", "tcp", "-d", apiserver.SERVICE_IP, "--dport", "443",
        "-m", "comment", "--comment", COMMENT,
        "-j", "DNAT", "--to-destination", f"127.0.0.1:{state.api_port}",
    ]  # fmt: skip
    _run("iptables", "-t", "nat", "-A", *state.dnat)


def _dnsmasq(root: Path, log_dir: Path) -> subprocess.Popen[bytes]:
    """The pods' resolver: kubernetes.default.svc is the Service's IP; every other name under
    cluster.local does not exist (NXDOMAIN, so a resolver goes on to the next search domain)."""
    command = [
        shutil.which("dnsmasq") or "/usr/sbin/dnsmasq",
        "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
        "--bind-interfaces", f"--listen-address={NODE_IP}", "--user=root",
        f"--pid-file={root / 'dnsmasq.pid'}",
        f"--address=/kubernetes.default.svc/{apiserver.SERVICE_IP}",
        "--local=/cluster.local/", "--log-facility=-",
    ]  # fmt: skip
    return spawn(command, log_dir / "dnsmasq.log")


def _containerd(root: Path, log_dir: Path) -> subprocess.Popen[bytes]:
    cni = root / "cni"
    (cni / "net.d").mkdir(parents=True, exist_ok=True)
    (cni / "net.d" / "10-cronlease.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "cronlease",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": BRIDGE,
                        "isGateway": True,
                        "ipMasq": False,
                        "hairpinMode": True,
                        "ipam": {
                            "type": "host-local",
                            "ranges": [[{"subnet": SUBNET, "gateway": NODE_IP}]],
                            "routes": [{"dst": "0.0.0.0/0"}],
                            "dataDir": str(cni / "ipam"),
                        },
                    }
                ],
            }
        )
    )
    config = root / "containerd" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    config.write_text(
        f"""version = 2
root = "{root / "containerd" / "root"}"
state = "{root / "containerd" / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{root / "containerd" / "containerd.sock"}"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
[{cri}.containerd]
  snapshotter = "native"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.cni]
  bin_dir = "{CNI_BIN}"
  conf_dir = "{cni / "net.d"}"
"""
    )
    return spawn(["containerd", "--config", str(config)], log_dir / "containerd.log")


def import_images(state: NodeState, archives: list[Path], cluster_dir: Path) -> None:
    """Import each OCI archive not imported yet in this form, unpacked for the CRI's
    snapshotter, under the name its ref says and under that name normalised as the kubelet asks
    for it (`cronlease:0.1.0` is docker.io/library/cronlease:0.1.0)."""
    for archive in archives:
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        if state.imported.get(str(archive)) == digest:
            continue
        _ctr(state, "images", "import", "--snapshotter", "native", str(archive))
        state.imported[str(archive)] = digest
        _save(state, cluster_dir)
    for name in _ctr(state, "images", "list", "--quiet").stdout.split():
        full = normalised(name)
        if full != name and not name.startswith(("sha256:", "import-")):
            _ctr(state, "images", "tag", "--force", name, full)


def normalised(reference: str) -> str:
    """A reference as the CRI resolves it: docker.io and library/ where no registry is named."""
    first, _, rest = reference.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return reference
    return f"docker.io/{reference if rest else 'library/' + reference}"


def _kubelet(state: NodeState, bins: Path, server: str, log_dir: Path) -> subprocess.Popen[bytes]:
    root = state.root / "kubelet"
    root.mkdir(parents=True, exist_ok=True)
    pki = Path(state.directory).parent / "pki"
    ca = CertificateAuthority.load(pki)
    kubeconfig = root / "kubeconfig"
    client = ca.issue("kubelet", f"system:node:{NODE_NAME}", ("system:nodes",))
    write_kubeconfig(kubeconfig, server, ca.pair, client)
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "failSwapOn": False,
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{state.socket}",
        "address": NODE_IP,
        "port": free_port(),
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": free_port(),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca.pair.cert)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "clusterDNS": [NODE_IP],
        "clusterDomain": "cluster.local",
        "podLogsDir": str(state.root / "pod-logs"),
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "registerNode": True,
        "serializeImagePulls": False,
    }
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    command = [
        str(bins / "kubelet"),
        f"--config={root / 'config.yaml'}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={root}",
        f"--cert-dir={root / 'pki'}",
        f"--hostname-override={NODE_NAME}",
        f"--node-ip={NODE_IP}",
        "--v=1",
    ]
    return spawn(command, log_dir / "kubelet.log")


def _ctr(state: NodeState, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["ctr", "--address", str(state.socket), "--namespace", NAMESPACE, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check and result.returncode != 0:
        raise NodeError(f"ctr {' '.join(args)}: {result.stderr.strip()}")
    return result


def _tasks(state: NodeState) -> list[str]:
    if not state.socket.exists():
        return []
    out = _ctr(state, "tasks", "list", "--quiet", check=False).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def _kill_shims(state: NodeState) -> None:
    """The runc shims outlive containerd by design; ours name its socket's directory."""
    marker = str(state.root).encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            raw = cmdline.read_bytes()
            if b"containerd-shim" in raw.split(b"\0", 1)[0] and marker in raw:
                os.kill(int(cmdline.parent.name), 9)


def _unmount_under(root: Path) -> None:
    """Every mount the kubelet and containerd left under the node's directory, deepest first."""
    prefix = str(root)
    mounts = [
        line.split()[1].replace("\\040", " ")
        for line in Path("/proc/mounts").read_text().splitlines()
        if line.split()[1].startswith(prefix)
    ]
    for mount in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True)


def _netns() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _chains() -> list[str]:
    """Every "table/chain" of iptables now."""
    found = []
    for table in ("filter", "nat", "mangle"):
        out = subprocess.run(["iptables", "-t", table, "-S"], capture_output=True, text=True).stdout
        found += [
            f"{table}/{line.split()[1]}" for line in out.splitlines() if line.startswith("-N ")
        ]
    return found


def _remove_new_chains(before: set[str]) -> None:
    """The chains the kubelet made (KUBE-FIREWALL, KUBE-KUBELET-CANARY, ...): each rule that jumps
    to one is removed, then the chain itself."""
    new = [c for c in _chains() if c not in before]
    for table in {c.split("/")[0] for c in new}:
        names = {c.split("/")[1] for c in new if c.startswith(f"{table}/")}
        out = subprocess.run(["iptables", "-t", table, "-S"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if parts[0] == "-A" and "-j" in parts and parts[parts.index("-j") + 1] in names:
                subprocess.run(["iptables", "-t", table, "-D", *parts[1:]], capture_output=True)
        for name in names:
            subprocess.run(["iptables", "-t", table, "-F", name], capture_output=True)
        for name in names:
            subprocess.run(["iptables", "-t", table, "-X", name], capture_output=True)


def _remove_cgroups() -> None:
    """The kubelet's cgroup tree (kubepods, with the QoS classes and pods), deepest first; a
    cgroup still in use stays (rmdir refuses it)."""
    for top in Path("/sys/fs/cgroup").glob("*/kubepods*"):
        for directory in sorted(
            (p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
        ):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()
    with contextlib.suppress(OSError):
        Path("/sys/fs/cgroup/kubepods").rmdir()  # cgroup v2


def _sysctl(name: str) -> str:
    return _run("sysctl", "-n", name).strip()


def _run(*args: str) -> str:
    result = subprocess.run(list(args), capture_output=True, text=True)
    if result.returncode != 0:
        raise NodeError(f"{' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise NodeError(f"timed out after {timeout:.0f} s waiting for {what}")
