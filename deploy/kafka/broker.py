#!/usr/bin/env python3
"""A single-node Apache Kafka 4.x broker (KRaft, combined broker+controller) for dev, tests, CI.

The broker runs from the jars Maven resolves (``deploy/kafka/pom.xml``, ``org.apache.kafka:
kafka_2.13``) on loopback only; all its state lives under the repository's git-ignored
``.state/kafka/``:

* ``libs/``                    the jars (``fetch()``; Maven runs only when they are missing)
* ``tools/``                   ``kafka-tools-<version>.jar``, Kafka's command-line tools (the
                               console consumer and producer; ``fetch_tools()``)
* ``data-<port>/``             the KRaft metadata log and the topic data
* ``server-<port>.properties`` the generated broker configuration
* ``broker-<port>.log``        the broker's log (stdout+stderr of the JVM), truncated at start
* ``broker-<port>.pid``        the JVM's pid while it runs

Python API (stdlib + confluent_kafka only)::

    from deploy.kafka.broker import start
    broker = start()              # a free port; waits until it answers a metadata request
    broker.bootstrap              # "127.0.0.1:PORT"
    broker.stop()                 # SIGTERM, then SIGKILL after a grace period

CLI::

    python3 deploy/kafka/broker.py fetch                  # resolve the jars (idempotent, quiet)
    python3 deploy/kafka/broker.py tools                  # + kafka-tools; prints the tools' classpath
    python3 deploy/kafka/broker.py start [--port 9092]    # detached; prints the bootstrap address
    python3 deploy/kafka/broker.py status [--port 9092]   # exit 0 when it answers, 1 otherwise
    python3 deploy/kafka/broker.py stop [--port 9092]

Errors: every failure (no ``java``/``mvn``, Maven cannot resolve, port in use, storage format
failure, the broker dies or does not answer in time) raises :class:`BrokerError` whose message
says what happened and, when the broker ran, includes the tail of its log.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
STATE = Path(os.environ.get("FAULTSTREAM_KAFKA_STATE", REPO / ".state" / "kafka"))
LIBS = STATE / "libs"
POM = HERE / "pom.xml"

#: Fixed KRaft cluster id (base64url of the 16 bytes ``faultstream-loca``), so a data dir can be
#: reused across restarts.
CLUSTER_ID = "ZmF1bHRzdHJlYW0tbG9jYQ"
NODE_ID = 1
DEFAULT_PORT = 9092
#: JVM heap (the machine is small and shared with the tests).
HEAP = os.environ.get("FAULTSTREAM_KAFKA_HEAP", "512m")
#: Largest record batch the broker accepts, bytes (10 MiB: the dead-letter tests send 5 MB values,
#: which grow by a third when base64-encoded in a DeadLetter).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # the dead-letter topic's limit (schemas/topics.py)

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = WARN
"""


class BrokerError(RuntimeError):
    """The local broker could not be fetched, started, reached or stopped (message says why)."""


# --------------------------------------------------------------------------------------- jars


def jars_present() -> bool:
    """True when ``.state/kafka/libs`` holds the broker jar and a log4j2 backend."""
    return LIBS.is_dir() and any(LIBS.glob("kafka_2.13-4.*.jar")) and any(LIBS.glob("log4j-core-*.jar"))


def kafka_version() -> str:
    """The Kafka version of the fetched jars (e.g. ``"4.4.0"``); raises BrokerError if absent."""
    jars = sorted(LIBS.glob("kafka_2.13-*.jar"))
    if not jars:
        raise BrokerError(f"no Kafka jars under {LIBS}: run `python3 deploy/kafka/broker.py fetch`")
    return jars[-1].name[len("kafka_2.13-") : -len(".jar")]


def fetch(*, force: bool = False) -> Path:
    """Copy the broker's jars to ``.state/kafka/libs`` with ``mvn -q dependency:copy-dependencies``.

    Skips Maven when the jars are already there (unless ``force``). Returns the libs directory.
    Raises BrokerError when ``mvn`` is missing or fails (its output is in the message).
    """
    if jars_present() and not force:
        return LIBS
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError("`mvn` not found on PATH: Maven 3 is needed to fetch the Kafka jars")
    LIBS.mkdir(parents=True, exist_ok=True)
    cmd = [mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies", f"-Dlibs.dir={LIBS}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not jars_present():
        out = (proc.stdout + proc.stderr)[-4000:]
        raise BrokerError(f"Maven could not fetch the Kafka jars (exit {proc.returncode}):\n{out}")
    return LIBS


def fetch_tools() -> str:
    """The classpath (``os.pathsep``-joined) of Kafka's command-line tools for the fetched broker
    version: the broker's jars (:func:`fetch`) and ``kafka-tools-<version>.jar``, copied by
    Maven into ``.state/kafka/tools/`` when missing. Raises BrokerError when ``mvn`` is missing
    or cannot resolve the jar."""
    libs = fetch()
    version = kafka_version()
    tools = STATE / "tools"
    jar = tools / f"kafka-tools-{version}.jar"
    if not jar.exists():
        mvn = shutil.which("mvn")
        if mvn is None:
            raise BrokerError(f"`mvn` not found on PATH: Maven 3 is needed to fetch org.apache.kafka:kafka-tools:{version}")
        tools.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            [mvn, "-q", "-B", "dependency:copy", f"-Dartifact=org.apache.kafka:kafka-tools:{version}",
             f"-DoutputDirectory={tools}"],
            capture_output=True, text=True, timeout=300, check=False,
        )
        if proc.returncode != 0 or not jar.exists():
            raise BrokerError(f"Maven could not fetch org.apache.kafka:kafka-tools:{version} (exit {proc.returncode}):\n"
                              f"{(proc.stdout + proc.stderr)[-3000:]}")
    return f"{jar}{os.pathsep}{libs / '*'}"


# ------------------------------------------------------------------------------------ helpers


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _is_our_broker(pid: int, port: int) -> bool:
    """The pid is a JVM running kafka.Kafka with this port's properties file (pid reuse guard)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"kafka.Kafka" in cmdline and str(_props_path(port)).encode() in cmdline


def _props_path(port: int) -> Path:
    return STATE / f"server-{port}.properties"


def _pid_path(port: int) -> Path:
    return STATE / f"broker-{port}.pid"


def _log_path(port: int) -> Path:
    return STATE / f"broker-{port}.log"


def _data_dir(port: int) -> Path:
    return STATE / f"data-{port}"


def log_tail(port: int, lines: int = 40) -> str:
    """The last ``lines`` lines of the broker's log ("" when there is none)."""
    try:
        text = _log_path(port).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _server_properties(port: int, controller_port: int, data_dir: Path) -> str:
    props = {
        "process.roles": "broker,controller",
        "node.id": NODE_ID,
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir),
        # one node: every replication factor and ISR is 1
        "default.replication.factor": 1,
        "min.insync.replicas": 1,
        "offsets.topic.replication.factor": 1,
        "offsets.topic.num.partitions": 8,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 4,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        # topics are created explicitly (faultstream topics create), never by a typo
        "auto.create.topics.enable": "false",
        "num.partitions": 1,
        "delete.topic.enable": "true",
        "group.initial.rebalance.delay.ms": 0,
        # small, test-friendly storage defaults (topics created from the catalogue override
        # retention); segments 16 MiB, default retention 1 h, checked every 30 s
        "log.segment.bytes": 16 * 1024 * 1024,
        "log.retention.ms": 3_600_000,
        "log.retention.check.interval.ms": 30_000,
        "log.cleaner.dedupe.buffer.size": 16 * 1024 * 1024,
        "log.cleaner.threads": 1,
        "message.max.bytes": MAX_MESSAGE_BYTES,
        "replica.fetch.max.bytes": MAX_MESSAGE_BYTES,
        # the machine has 2 cores
        "num.network.threads": 2,
        "num.io.threads": 4,
        "num.recovery.threads.per.data.dir": 1,
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


def _read_controller_port(port: int) -> int | None:
    try:
        for line in _props_path(port).read_text().splitlines():
            if line.startswith("controller.quorum.bootstrap.servers="):
                return int(line.rsplit(":", 1)[1])
    except (OSError, ValueError):
        return None
    return None


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise BrokerError("`java` not found on PATH (Kafka 4 needs Java 17 or newer)")
    return java


def _java_cmd(main: str, *args: str) -> list[str]:
    log4j = STATE / "log4j2.properties"
    if not log4j.exists() or log4j.read_text() != _LOG4J2:
        log4j.write_text(_LOG4J2)
    return [
        _java(),
        f"-Xmx{HEAP}",
        "-Xms128m",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j}",
        f"-Dkafka.logs.dir={STATE}",
        "-cp",
        str(LIBS / "*"),
        main,
        *args,
    ]


def _metadata_answers(bootstrap: str, timeout_s: float) -> bool:
    """True when the broker at ``bootstrap`` answers a metadata request listing >= 1 broker."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "socket.timeout.ms": 5000})
    try:
        md = admin.list_topics(timeout=timeout_s)
    except Exception:  # KafkaException on timeout / transport failure
        return False
    return len(md.brokers) >= 1


# ------------------------------------------------------------------------------------- broker


@dataclass
class Broker:
    """A running local broker. ``process`` is set when this Python process started it."""

    port: int
    controller_port: int
    pid: int
    data_dir: Path
    log_path: Path
    ephemeral: bool = False
    started_in_s: float = 0.0
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:PORT"``, the ``bootstrap.servers`` value."""
        return f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        """True while the JVM runs."""
        if self.process is not None:
            return self.process.poll() is None
        return _pid_alive(self.pid)

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM (controlled shutdown), then SIGKILL after ``grace_s`` seconds. Removes the pid
        file, and the data dir, properties and log when the broker is ``ephemeral``. Idempotent."""
        if self.alive():
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + grace_s
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            if self.alive():
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                deadline = time.monotonic() + 10
                while self.alive() and time.monotonic() < deadline:
                    time.sleep(0.05)
        if self.process is not None:
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        pid_file = _pid_path(self.port)
        if pid_file.exists() and pid_file.read_text().strip() == str(self.pid):
            pid_file.unlink()
        if self.ephemeral:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            _props_path(self.port).unlink(missing_ok=True)
            self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> "Broker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(
    port: int | None = None,
    *,
    timeout_s: float = 60.0,
    fresh: bool = False,
    ephemeral: bool = False,
    detach: bool = False,
) -> Broker:
    """Start a broker on ``127.0.0.1:port`` (a free port when None) and wait until it answers.

    * Fetches the jars if needed (:func:`fetch`).
    * Formats ``.state/kafka/data-<port>`` for KRaft with the fixed :data:`CLUSTER_ID`
      (``kafka.tools.StorageTool format --standalone``) unless it is already formatted; ``fresh``
      deletes it first. ``ephemeral`` deletes it again in :meth:`Broker.stop`.
    * ``detach``: the JVM gets its own session (it outlives this Python process, as the CLI
      needs). Either way its pid is written to ``.state/kafka/broker-<port>.pid``.
    * Waits up to ``timeout_s`` seconds for a metadata answer (confluent_kafka AdminClient).

    Raises BrokerError when the port is taken, formatting fails, the JVM exits, or it does not
    answer in time (the JVM is then killed; the message holds the log's tail).
    """
    t0 = time.monotonic()
    fetch()
    STATE.mkdir(parents=True, exist_ok=True)
    if port is None:
        port = free_port()
    existing = _pid_path(port)
    if existing.exists():
        try:
            old = int(existing.read_text().strip())
        except ValueError:
            old = -1
        if old > 0 and _pid_alive(old) and _is_our_broker(old, port):
            raise BrokerError(f"a local broker already runs on port {port} (pid {old}); stop it first")
        existing.unlink()
    if not _port_free(port):
        raise BrokerError(f"port 127.0.0.1:{port} is in use by another process")

    data_dir = _data_dir(port)
    if fresh:
        shutil.rmtree(data_dir, ignore_errors=True)
    formatted = (data_dir / "meta.properties").exists()
    controller_port = _read_controller_port(port) if formatted else None
    if controller_port is None or controller_port == port or not _port_free(controller_port):
        if formatted:
            # the KRaft voter set records the controller endpoint: a new port needs a new log
            shutil.rmtree(data_dir, ignore_errors=True)
            formatted = False
        controller_port = free_port()
        while controller_port == port:
            controller_port = free_port()
    props = _props_path(port)
    props.write_text(_server_properties(port, controller_port, data_dir))

    if not formatted:
        data_dir.mkdir(parents=True, exist_ok=True)
        fmt = subprocess.run(
            _java_cmd(
                "kafka.tools.StorageTool", "format", "--config", str(props),
                "--cluster-id", CLUSTER_ID, "--standalone", "--ignore-formatted",
            ),
            capture_output=True,
            text=True,
        )
        if fmt.returncode != 0:
            raise BrokerError(
                f"formatting KRaft storage {data_dir} failed (exit {fmt.returncode}):\n"
                f"{(fmt.stdout + fmt.stderr)[-4000:]}"
            )

    log_path = _log_path(port)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            _java_cmd("kafka.Kafka", str(props)),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=detach,
            cwd=STATE,
        )
    _pid_path(port).write_text(f"{proc.pid}\n")
    broker = Broker(port, controller_port, proc.pid, data_dir, log_path, ephemeral=ephemeral, process=proc)

    deadline = t0 + timeout_s
    while True:
        if proc.poll() is not None:
            _pid_path(port).unlink(missing_ok=True)
            raise BrokerError(
                f"the Kafka broker on port {port} exited with code {proc.returncode} during start; "
                f"log {log_path}:\n{log_tail(port)}"
            )
        if _port_open(port) and _metadata_answers(broker.bootstrap, timeout_s=2.0):
            break
        if time.monotonic() > deadline:
            broker.stop(grace_s=2.0)
            raise BrokerError(
                f"the Kafka broker on port {port} did not answer a metadata request within "
                f"{timeout_s:.0f} s; log {log_path}:\n{log_tail(port)}"
            )
        time.sleep(0.1)
    broker.started_in_s = time.monotonic() - t0
    if detach:
        broker.process = None  # do not reap it from here; it outlives us
    return broker


def attach(port: int = DEFAULT_PORT) -> Broker | None:
    """The broker a pid file records for ``port`` if that JVM still runs, else None."""
    pid_file = _pid_path(port)
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    if not (_pid_alive(pid) and _is_our_broker(pid, port)):
        return None
    return Broker(port, _read_controller_port(port) or 0, pid, _data_dir(port), _log_path(port))


# ---------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    """``fetch | tools | start | stop | status [--port N]``; exit 0 on success, 1 on failure."""
    parser = argparse.ArgumentParser(prog="broker.py", description="local single-node Kafka (KRaft)")
    parser.add_argument("command", choices=["fetch", "tools", "start", "stop", "status"])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="PLAINTEXT port on 127.0.0.1 (default 9092)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the broker (start)")
    parser.add_argument("--fresh", action="store_true", help="start: delete the port's data dir first")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            fetch()
            print(f"Kafka {kafka_version()} jars in {LIBS}")
        elif args.command == "tools":
            print(fetch_tools())
        elif args.command == "start":
            running = attach(args.port)
            if running is not None:
                print(f"already running: {running.bootstrap} (pid {running.pid})")
                return 0
            broker = start(args.port, timeout_s=args.timeout, fresh=args.fresh, detach=True)
            print(
                f"Kafka {kafka_version()} on {broker.bootstrap} (pid {broker.pid}, "
                f"started in {broker.started_in_s:.1f} s, log {broker.log_path})"
            )
        elif args.command == "stop":
            running = attach(args.port)
            if running is None:
                print(f"no local broker on port {args.port}")
                return 0
            running.stop()
            print(f"stopped broker on port {args.port} (pid {running.pid})")
        else:  # status
            running = attach(args.port)
            if running is None:
                print(f"not running (port {args.port})")
                return 1
            ok = _metadata_answers(running.bootstrap, timeout_s=5.0)
            print(f"{'running' if ok else 'not answering'}: {running.bootstrap} (pid {running.pid})")
            return 0 if ok else 1
    except BrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
