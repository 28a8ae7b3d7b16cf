"""A private one-node Slurm cluster on 127.0.0.1 for tests: real munged, slurmctld and slurmd
(Debian slurm-wlm), each with its own key, socket, state and spool folders in a temp dir and
high ports, run in the foreground and stopped by pid. Its login node is a private sshd whose
sessions get ``SLURM_CONF`` (sshd's SetEnv), so sbatch and squeue over SSH reach this cluster.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.sshd import SSHServer, free_port, make_server

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel")


@dataclass
class SlurmCluster:
    dir: Path
    conf: Path
    login: SSHServer = None
    procs: list = field(default_factory=list)

    @property
    def env(self) -> dict:
        return dict(os.environ, SLURM_CONF=str(self.conf))

    def command(self, *argv, check=True) -> str:
        """A Slurm client command on this cluster (from the test, not through the login node)."""
        proc = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=30)
        if check and proc.returncode != 0:
            raise RuntimeError("%s: %s" % (" ".join(argv), proc.stderr))
        return proc.stdout

    def queued(self, check=True) -> list:
        """[(job_task, state)] of every array task queued or running."""
        out = self.command("squeue", "-h", "-r", "-o", "%i|%T", check=check)
        return [tuple(line.split("|")) for line in out.splitlines() if "|" in line]

    def start(self):
        d = self.dir
        self._spawn("munged", ["munged", "--foreground", "--force", "--key-file", str(d / "munge-key/munge.key"),
                               "--socket", str(d / "munge/socket"), "--pid-file", str(d / "munge/munged.pid"),
                               "--seed-file", str(d / "munge/seed"), "--log-file", str(d / "log/munged.log")])
        _wait_for(lambda: (d / "munge/socket").exists(), "munged")
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        _wait_for(lambda: subprocess.run(["scontrol", "ping"], env=self.env, capture_output=True).returncode == 0,
                  "slurmctld", d / "log/slurmctld.out")
        self._spawn("slurmd", ["slurmd", "-D", "-N", "localhost", "-f", str(self.conf)])
        _wait_for(lambda: self.command("sinfo", "-h", "-o", "%t", check=False).strip() in ("idle", "mix", "alloc"),
                  "slurmd", d / "log/slurmd.out")
        return self

    def stop(self):
        """Cancel what is left, then stop the daemons by pid (slurmd first, munged last)."""
        if self.procs:
            subprocess.run(["scancel", "--me"], env=self.env, capture_output=True)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.queued(check=False):
                time.sleep(0.2)
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.procs = []
        if self.login:
            self.login.stop()

    def _spawn(self, name, argv):
        log = open(self.dir / "log" / (name + ".out"), "ab")
        self.procs.append((name, subprocess.Popen(argv, env=self.env, stdout=log, stderr=log,
                                                  start_new_session=True)))


def make_cluster(d: Path) -> SlurmCluster:
    """Write the cluster's files under ``d``, start it and its login node."""
    d.mkdir(parents=True, exist_ok=True)
    for sub in ("munge-key", "munge", "state", "spool", "log"):
        (d / sub).mkdir(exist_ok=True)
    os.chmod(d / "munge-key", 0o700)
    key = d / "munge-key/munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    os.chmod(d / "munge", 0o755)  # the socket's folder: clients must reach it
    conf = d / "slurm.conf"
    conf.write_text(_slurm_conf(d))
    cluster = SlurmCluster(d, conf)
    try:
        cluster.start()
        login = make_server(d / "login")
        login.stop()  # again with SLURM_CONF in every session
        with open(login.dir / "sshd_config", "a") as f:
            f.write("SetEnv SLURM_CONF=%s\n" % conf)
        cluster.login = login.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _slurm_conf(d: Path) -> str:
    cpus = os.cpu_count() or 1
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    return "\n".join([
        "ClusterName=harnesstest",
        "SlurmctldHost=localhost(127.0.0.1)",
        "SlurmctldPort=%d" % free_port(),
        "SlurmdPort=%d" % free_port(),
        "SlurmUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "AuthInfo=socket=%s" % (d / "munge/socket"),
        "StateSaveLocation=%s" % (d / "state"),
        "SlurmdSpoolDir=%s" % (d / "spool"),
        "SlurmctldPidFile=%s" % (d / "slurmctld.pid"),
        "SlurmdPidFile=%s" % (d / "slurmd.pid"),
        "SlurmctldLogFile=%s" % (d / "log/slurmctld.log"),
        "SlurmdLogFile=%s" % (d / "log/slurmd.log"),
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "ReturnToService=2",
        "KillWait=2",
        "MinJobAge=600",
        "NodeName=localhost NodeAddr=127.0.0.1 CPUs=%d RealMemory=%d State=UNKNOWN" % (cpus, max(memory // 2, 100)),
        "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
    ]) + "\n"


def missing_tools() -> list:
    return [t for t in DAEMONS if not shutil.which(t) and not Path("/usr/sbin", t).exists()]


def _wait_for(predicate, what, log: Path = None, seconds: float = 20):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise RuntimeError("%s did not start%s" % (what, ": " + log.read_text()[-2000:] if log and log.exists() else ""))
