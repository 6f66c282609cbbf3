"""docker-compose.yml and the Dockerfile refer only to things that exist (no Docker engine here).

The checks follow what `docker compose up` would do: each service's image or build context,
the files the Dockerfile copies, the modules the commands run (mapped from the image's paths
back to the repository), the Redis URLs (compose service names), ports, healthchecks and
dependencies.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
SERVICES = {"redis", "worker", "producer", "flower"}
URL = re.compile(r"\b(?:redis|rediss)://(?:[^@/\s]*@)?([A-Za-z0-9_.-]+)(?::(\d+))?")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def argv(command: Any) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


class Image:
    """What a Dockerfile puts where: image path -> repository path, the last WORKDIR, its ENV."""

    def __init__(self, context: Path, dockerfile: Path) -> None:
        self.context = context
        self.copies: list[tuple[PurePosixPath, Path]] = []
        self.env: dict[str, str] = {}
        workdir = PurePosixPath("/")
        for line in dockerfile.read_text().splitlines():
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            instruction, args = words[0].upper(), words[1:]
            if instruction == "WORKDIR":
                workdir = workdir / args[0]
            elif instruction == "ENV":
                self.env.update(arg.split("=", 1) for arg in args if "=" in arg)
            elif instruction == "COPY":
                assert not any(arg.startswith("--from") for arg in args), line
                *sources, dest = (arg for arg in args if not arg.startswith("--"))
                target = workdir / dest
                for source in sources:
                    path = context / source
                    assert path.exists(), f"Dockerfile: COPY source {source!r} is not in the build context"
                    # COPY dir dest: the directory's contents into dest; a file into dest/ when
                    # dest ends with / (or there are several sources), else to the path dest.
                    into_dir = path.is_file() and (dest.endswith("/") or len(sources) > 1)
                    self.copies.append((target / path.name if into_dir else target, path))
        self.workdir = workdir

    def repo_path(self, image_path: PurePosixPath) -> Path | None:
        """The repository file or directory that ends up at ``image_path``, if one does."""
        for target, source in self.copies:
            if image_path == target:
                return source
            if source.is_dir() and image_path.is_relative_to(target):
                return source / image_path.relative_to(target)
        return None

    def module(self, name: str, workdir: PurePosixPath) -> Path | None:
        """Where ``import name`` finds its source in the image, from ``workdir`` or PYTHONPATH."""
        roots = [workdir, *(PurePosixPath(p) for p in self.env.get("PYTHONPATH", "").split(":") if p)]
        parts = name.split(".")
        for root in roots:
            for candidate in (
                root.joinpath(*parts, "__init__.py"),
                root.joinpath(*parts[:-1], parts[-1] + ".py"),
            ):
                found = self.repo_path(candidate)
                if found is not None and found.is_file():
                    return found
        return None


@pytest.fixture(scope="module")
def image(compose: dict[str, Any]) -> Image:
    contexts = {service.get("build") for service in compose["services"].values() if "build" in service}
    assert contexts == {"."}, "every built service uses the repository's Dockerfile"
    dockerfile = ROOT / "Dockerfile"
    assert dockerfile.is_file()
    return Image(ROOT, dockerfile)


def test_the_services_and_their_images(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == SERVICES
    for name, service in services.items():
        assert ("image" in service) != ("build" in service), f"{name}: an image or a build, not both"
        if "image" in service:
            tag = service["image"].partition(":")[2]
            assert tag and tag != "latest", f"{name}: pin the image's tag ({service['image']})"
    assert services["redis"]["image"].startswith("redis:")
    assert services["flower"]["image"].startswith("mher/flower:")
    assert services["worker"]["build"] == services["producer"]["build"] == "."


def test_dependencies_wait_for_healthchecks_that_exist(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("redis", "worker", "flower"):
        test = services[name]["healthcheck"]["test"]
        assert test[0] in ("CMD", "CMD-SHELL") and len(test) >= 2, name
    for name, service in services.items():
        for dependency, condition in (service.get("depends_on") or {}).items():
            assert dependency in services, f"{name} depends on unknown service {dependency!r}"
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in services[dependency], f"{name} waits for {dependency}'s healthcheck"
    assert services["worker"]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert services["producer"]["depends_on"]["worker"]["condition"] == "service_healthy"


def test_the_worker_and_producer_run_modules_of_the_example_project(
    compose: dict[str, Any], image: Image
) -> None:
    services = compose["services"]
    workdir = PurePosixPath(services["worker"].get("working_dir", image.workdir))
    assert image.repo_path(workdir / "proj") == ROOT / "examples" / "proj"

    worker = argv(services["worker"]["command"])
    assert worker[:2] == ["celery", "-A"] and worker[3] == "worker"
    app_module = image.module(worker[2], workdir)
    assert app_module == ROOT / "examples" / "proj" / "__init__.py"
    assert re.search(r"^from \.app import app$", app_module.read_text(), re.M), (
        "celery -A proj finds proj.app"
    )

    producer = argv(services["producer"]["command"])
    assert producer[:2] == ["python", "-m"]
    assert image.module(producer[2], workdir) == ROOT / "examples" / "proj" / "produce.py"

    # The image's default command is the worker too, on the same app.
    cmd = re.search(r"^CMD (\[.*\])$", (ROOT / "Dockerfile").read_text(), re.M)
    assert cmd and yaml.safe_load(cmd[1])[:3] == ["celery", "-A", "proj"]


def test_the_worker_consumes_every_queue_the_example_routes_to(compose: dict[str, Any]) -> None:
    worker = argv(compose["services"]["worker"]["command"])
    queues = set(worker[worker.index("-Q") + 1].split(","))
    spec = importlib.util.spec_from_file_location(
        "example_celeryconfig", ROOT / "examples/proj/celeryconfig.py"
    )
    assert spec and spec.loader
    config = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(config)
    routed = {route["queue"] for route in config.task_routes.values()}
    assert {config.task_default_queue, *routed, *config.redislock_queues} <= queues


def test_every_redis_url_names_the_redis_service(compose: dict[str, Any]) -> None:
    services = compose["services"]
    found = []
    for name, service in services.items():
        texts = [
            *argv(service.get("command", [])),
            *(str(v) for v in (service.get("environment") or {}).values()),
        ]
        for text in texts:
            for host, port in URL.findall(text):
                found.append(name)
                assert host == "redis" and port in ("", "6379"), f"{name}: {text!r} is not the redis service"
    assert set(found) == {"worker", "producer", "flower"}
    for name in ("worker", "producer"):
        assert services[name]["environment"]["REDIS_URL"].startswith("redis://redis:6379/")


def test_the_worker_healthcheck_pings_the_worker_node_it_names(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    node = argv(worker["command"])[argv(worker["command"]).index("-n") + 1]
    assert node == "worker@%h"  # %h: the container's hostname, which is $HOSTNAME inside it
    check = worker["healthcheck"]["test"]
    assert check[0] == "CMD-SHELL" and "inspect ping -d worker@$$HOSTNAME" in check[1]


def test_flower_listens_on_the_published_port(compose: dict[str, Any]) -> None:
    flower = compose["services"]["flower"]
    command = argv(flower["command"])
    assert "flower" in command and "--port=5555" in command
    assert "5555:5555" in flower["ports"]
    assert "http://localhost:5555/healthcheck" in flower["healthcheck"]["test"]


def test_mounted_paths_exist_and_nothing_the_image_needs_is_docker_ignored(
    compose: dict[str, Any], image: Image
) -> None:
    for name, service in compose["services"].items():
        for volume in service.get("volumes") or []:
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume.get("source", "")
            if source.startswith((".", "/")):
                assert (ROOT / source).exists(), f"{name}: mounted path {source!r} does not exist"
    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip()]
    for _, source in image.copies:
        relative = source.relative_to(ROOT).as_posix()
        assert not any(Path(relative).match(pattern) or relative == pattern for pattern in ignored), relative
