# The image of docker-compose.yml's worker and producer: this package and the example project.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY celery_redislock ./celery_redislock
RUN pip install .

COPY examples/proj ./examples/proj
WORKDIR /app/examples
ENV PYTHONPATH=/app/examples

# Celery warns when a worker runs as root.
RUN useradd --create-home --uid 1000 celery
USER celery

CMD ["celery", "-A", "proj", "worker", "--loglevel=INFO"]
