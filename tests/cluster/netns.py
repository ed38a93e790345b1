"""A cluster on this box for the suite: hosts made of Linux namespaces, reached over ssh.

Each host is a network namespace (``pp-h0``, ``pp-h1``, ...) joined to the others by a veth
link to a bridge in a switch namespace (``pp-sw``), on a private subnet that no interface of
the machine's own is on: traffic stays between the namespaces made here. On every host the
link has the same name (``ppnet``: Horovod needs one interface name common to all hosts). A
holder process per host owns its UTS namespace (its own hostname: Horovod fails when hosts
share one) and mount namespace (the suite's hosts file bound over /etc/hosts, so the host
names resolve without touching the machine's); the host's sshd (Debian's openssh-server,
started here on a port of its own with a config, keys and authorized_keys in the cluster's
folder, never as a system service) runs inside those namespaces, pinned to the host's own
cores, and so does everything started over ssh. An ``ssh`` wrapper on the cluster's PATH
adds the cluster's ssh config (host names, port, key), so horovodrun's plain ``ssh host``
works and ~/.ssh is left alone.

``Cluster.stop`` removes everything it made, and ``clean_leftovers`` what an interrupted
earlier run left (namespaces and processes with the cluster's prefix), so a run starts clean.

    python -m tests.cluster.netns up [N]     # start N hosts (2), print how to reach them
    python -m tests.cluster.netns down       # remove the cluster and any leftover
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "pp-"  # namespaces and veth ends this module makes; leftovers with it are removed
SWITCH = f"{PREFIX}sw"
IFACE = "ppnet"  # the link's name on every host
SUBNET = "10.213.77"  # a /24 no interface of this machine is on (checked before starting)
SSH_PORT = 2222
ROOT = Path(os.environ.get("TMPDIR", "/tmp")) / "pipeprof-cluster"


def unavailable() -> str | None:
    """Why a cluster cannot be made here (one line), or None."""
    if os.geteuid() != 0:
        return "the cluster tests need root (network and UTS namespaces)"
    for tool in ("ip", "unshare", "nsenter", "taskset", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"the cluster tests need {tool} on PATH"
    if not Path("/usr/sbin/sshd").exists():
        return (
            "the cluster tests need openssh-server (bash scripts/setup.sh test installs it as root)"
        )
    probe = subprocess.run(["ip", "netns", "add", f"{PREFIX}probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"ip netns does not work here: {probe.stderr.strip()[:200]}"
    subprocess.run(["ip", "netns", "del", f"{PREFIX}probe"], capture_output=True)
    return None


def _run(*argv: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def _in_ns(ns: str, *argv: str) -> str:
    return _run("ip", "netns", "exec", ns, *argv)


@dataclass
class Host:
    name: str  # its hostname, and its namespace's name
    ip: str
    cores: list[int]
    holder: subprocess.Popen | None = None  # unshare, whose child owns the host's namespaces
    pid: int = 0  # that child: what nsenter enters
    sshd: subprocess.Popen | None = None

    @property
    def enter(self) -> list[str]:
        """Prefix that runs a command on this host: its namespaces and its cores."""
        assert self.pid, "the host is not up"
        cpus = ",".join(map(str, self.cores))
        return ["nsenter", "-t", str(self.pid), "-u", "-m", "-n", "taskset", "-c", cpus]


@dataclass
class Cluster:
    n: int = 2
    root: Path = ROOT
    hosts: list[Host] = field(default_factory=list)

    def __post_init__(self) -> None:
        cores = sorted(os.sched_getaffinity(0))
        self.hosts = [
            Host(f"{PREFIX}h{i}", f"{SUBNET}.{i + 1}", [cores[i % len(cores)]])
            for i in range(self.n)
        ]

    # -- set-up --------------------------------------------------------------------------
    def start(self) -> Cluster:
        clean_leftovers(self.root)
        try:
            self._files()
            self._network()
            for host in self.hosts:
                self._boot(host)
            self.wait_for_ssh()
        except BaseException:
            self.stop()
            raise
        return self

    def _files(self) -> None:
        r = self.root
        (r / "bin").mkdir(parents=True, exist_ok=True)
        if not (r / "id").exists():
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(r / "id"))
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(r / "host_key"))
        (r / "authorized_keys").write_text((r / "id.pub").read_text())
        os.chmod(r / "authorized_keys", 0o600)
        hosts = "127.0.0.1 localhost\n" + "".join(f"{h.ip} {h.name}\n" for h in self.hosts)
        (r / "hosts").write_text(hosts)
        (r / "sshd_config").write_text(
            f"Port {SSH_PORT}\nHostKey {r / 'host_key'}\nAuthorizedKeysFile {r / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUsePAM no\nStrictModes no\n"
            "PrintMotd no\nAcceptEnv *\nPermitUserEnvironment yes\nMaxStartups 100:30:200\n"
            "MaxSessions 100\nLogLevel ERROR\n"
        )
        (r / "ssh_config").write_text(
            "".join(f"Host {h.name}\n  HostName {h.ip}\n" for h in self.hosts)
            + f"Host *\n  Port {SSH_PORT}\n  User root\n  IdentityFile {r / 'id'}\n  IdentitiesOnly yes\n"
            f"  StrictHostKeyChecking no\n  UserKnownHostsFile {r / 'known_hosts'}\n  LogLevel ERROR\n"
            "  BatchMode yes\n  ConnectTimeout 5\n"
        )
        wrapper = r / "bin" / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {r / "ssh_config"} "$@"\n')
        wrapper.chmod(0o755)

    def _network(self) -> None:
        taken = _run("ip", "-4", "-o", "addr", "show")
        if f" {SUBNET}." in taken:
            raise RuntimeError(f"{SUBNET}.0/24 is already on an interface of this machine")
        _run("ip", "netns", "add", SWITCH)
        _in_ns(SWITCH, "ip", "link", "add", "br0", "type", "bridge")
        _in_ns(SWITCH, "ip", "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts):
            _run("ip", "netns", "add", host.name)
            # made inside the switch namespace, so no end ever appears among the machine's links
            _in_ns(
                SWITCH,
                "ip",
                "link",
                "add",
                f"sw{i}",
                "type",
                "veth",
                "peer",
                "name",
                IFACE,
                "netns",
                host.name,
            )
            _in_ns(SWITCH, "ip", "link", "set", f"sw{i}", "master", "br0", "up")
            _in_ns(host.name, "ip", "addr", "add", f"{host.ip}/24", "dev", IFACE)
            _in_ns(host.name, "ip", "link", "set", IFACE, "up")
            _in_ns(host.name, "ip", "link", "set", "lo", "up")

    def _boot(self, host: Host) -> None:
        script = (
            # a /run of its own: sshd wants /run/sshd, which the machine need not have
            f"hostname {host.name} && mount --bind {self.root / 'hosts'} /etc/hosts && "
            "mount -t tmpfs -o mode=755 pp-run /run && mkdir -m 755 /run/sshd && "
            "echo up && exec sleep infinity"
        )
        host.holder = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                host.name,
                "unshare",
                "--uts",
                "--mount",
                "--propagation",
                "private",
                "--fork",
                "sh",
                "-c",
                script,
            ],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert host.holder.stdout is not None
        if host.holder.stdout.readline().strip() != "up":
            raise RuntimeError(f"{host.name}: its namespaces did not come up")
        # the holder's pid is unshare's; its forked child holds the namespaces: enter that one
        host.pid = int(_run("pgrep", "-P", str(host.holder.pid)).split()[0])
        self.start_sshd(host)

    def start_sshd(self, host: Host) -> None:
        """The host's sshd, in its namespaces and on its cores (again, after ``stop_sshd``)."""
        host.sshd = subprocess.Popen(
            [
                *host.enter,
                "/usr/sbin/sshd",
                "-D",
                "-e",
                "-f",
                str(self.root / "sshd_config"),
                "-o",
                f"ListenAddress={host.ip}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / f"sshd-{host.name}.log", "a"),  # noqa: SIM115 (lives with sshd)
            start_new_session=True,
        )

    def wait_for_ssh(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        for host in self.hosts:
            while True:
                probe = subprocess.run(
                    self.ssh(self.hosts[0], host.name, "hostname"), capture_output=True, text=True
                )
                if probe.returncode == 0 and probe.stdout.strip() == host.name:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{host.name}: sshd did not answer: {probe.stderr.strip()[:300]}"
                    )
                time.sleep(0.2)

    # -- faults ----------------------------------------------------------------------------
    def stop_sshd(self, host: Host) -> None:
        """The host's sshd stopped (its listener only: sessions already open go on)."""
        if host.sshd is not None and host.sshd.poll() is None:
            os.killpg(host.sshd.pid, signal.SIGTERM)
            host.sshd.wait(timeout=5)

    def set_link(self, host: Host, up: bool) -> None:
        """The host's link to the others up or down (as a pulled cable: nothing is told)."""
        _in_ns(host.name, "ip", "link", "set", IFACE, "up" if up else "down")

    def set_hostname(self, host: Host, name: str) -> None:
        """The hostname the host gives itself (its UTS namespace's)."""
        _run("nsenter", "-t", str(host.pid), "-u", "hostname", name)

    def processes(self, host: Host) -> list[str]:
        """What runs on the host besides its own machinery (the namespace holder, sshd's
        listener): "pid: command" each. A test's launch leaves nothing here when it ends."""
        own = {host.pid, host.holder.pid if host.holder else 0, host.sshd.pid if host.sshd else 0}
        pids = subprocess.run(
            ["ip", "netns", "pids", host.name], capture_output=True, text=True
        ).stdout.split()
        out = []
        for pid in map(int, pids):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (FileNotFoundError, ProcessLookupError):
                continue
            if pid not in own and state != "Z":
                out.append(f"{pid}: {cmd.strip()[:160]}")
        return out

    # -- use -----------------------------------------------------------------------------
    @property
    def env(self) -> dict[str, str]:
        """The environment for commands run on a host: the ssh wrapper first on PATH."""
        return dict(os.environ, PATH=f"{self.root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")

    def ssh(self, on: Host, to: str, *argv: str) -> list[str]:
        """The command that runs ``argv`` on host ``to``, over ssh from host ``on``."""
        return [*on.enter, str(self.root / "bin" / "ssh"), to, *argv]

    def command(self, host: Host, argv: list[str], cwd: str | Path | None = None) -> list[str]:
        """``argv`` started on ``host`` directly (its namespaces and cores): the launcher's side;
        in ``cwd`` (entering a mount namespace starts in /), this process's by default."""
        enter = list(host.enter)
        enter.insert(enter.index("-n") + 1, f"--wd={cwd or os.getcwd()}")
        return [*enter, *argv]

    # -- tear-down -----------------------------------------------------------------------
    def stop(self) -> None:
        for host in self.hosts:
            for proc in (host.sshd, host.holder):
                if proc is not None and proc.poll() is None:
                    try:
                        os.killpg(proc.pid, signal.SIGTERM)  # each started in a session of its own
                    except (ProcessLookupError, PermissionError):
                        pass
        clean_leftovers(self.root)
        for proc in [p for h in self.hosts for p in (h.sshd, h.holder) if p is not None]:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(
            self.root, ignore_errors=True
        )  # the cluster's own folder: keys, configs, logs


def clean_leftovers(root: Path = ROOT) -> None:
    """Remove every namespace with the cluster's prefix and kill whatever still runs in one
    (an earlier run interrupted before its tear-down)."""
    names = [line.split()[0] for line in _run("ip", "netns", "list").splitlines() if line.strip()]
    for ns in names:
        if not ns.startswith(PREFIX):
            continue
        pids = subprocess.run(
            ["ip", "netns", "pids", ns], capture_output=True, text=True
        ).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["down"]:
        clean_leftovers()
        return 0
    if (why := unavailable()) is not None:
        print(why, file=sys.stderr)
        return 2
    cluster = Cluster(int(argv[1]) if len(argv) > 1 else 2).start()
    for h in cluster.hosts:
        print(f"{h.name} {h.ip} cores {h.cores}: {' '.join(h.enter)} CMD")
    print(f"ssh: {cluster.root / 'bin' / 'ssh'} HOST CMD (from inside a host)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
