"""A fair call sent with a countdown or an ETA is still a fair call when it comes due: it waited
in a worker's memory, outside its lane, and goes back to its lane to wait its turn there, so a
flood sent with a countdown does not all run ahead of another tenant's calls."""

from __future__ import annotations

import pytest
import redis

from .mode_harness import Deployment, node
from .test_fair_share import Sent, drain, fair

FLOOD = 100
FEW = 10
COUNTDOWN = 3


@pytest.mark.redis_broker(
    "a worker with a prefetch of 1 on RabbitMQ took messages with an ETA two every 10 s (Celery "
    "5.7, RabbitMQ 3.10): 110 would take nine minutes"
)
def test_b_starts_before_a_flood_sent_with_a_countdown_drains(
    deployment: Deployment, coord: redis.Redis
) -> None:
    task = fair(fair_lanes=4)
    app = deployment.app()
    sender = task.sender(app)
    calls = [("A", n) for n in range(FLOOD)] + [("B", n) for n in range(FEW)]
    sent = [Sent(sender.apply_async(call, countdown=COUNTDOWN), call) for call in calls]
    proc = deployment.start(
        task, "-c", "1", "--prefetch-multiplier", "1", "-n", node("fair-due"), pool="solo"
    )
    order = drain(coord, sent, FLOOD + FEW)
    b_positions = [i for i, tenant in enumerate(order) if tenant == "B"]
    assert len(b_positions) == FEW and order.count("A") == FLOOD
    # Served in turn once due, where before every call ran as it came due: B's after all of A's.
    assert b_positions[-1] < 4 * FEW, b_positions
    assert proc.log().count("Due fair fair.work[") == FLOOD + FEW
