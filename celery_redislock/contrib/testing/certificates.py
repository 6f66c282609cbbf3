"""Throwaway certificate authorities and server certificates for TLS tests, made with the
``openssl`` command line tool."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TestCA", "find_openssl"]


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
