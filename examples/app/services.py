"""Stand-ins for the outside world: a mail server and a payment provider. Nothing here
touches the network; the provider fails at random, the way real ones do on a bad day."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path


class ProviderUnavailable(Exception):
    """The provider answered 503: worth trying again later."""


class UnknownOrder(Exception):
    """The provider answered 404: trying again will not help."""


@dataclass(frozen=True)
class Receipt:
    order_id: int
    status: str


def deliver(outbox: Path, key: str, to: str, subject: str, body: str) -> Path:
    """'Send' a message by writing it to the outbox. The file is named by `key`, so a
    second run of the same job rewrites the same file instead of mailing twice."""
    message = EmailMessage()
    message["From"] = "shop@example.com"
    message["To"] = to
    message["Subject"] = subject
    message.set_content(body)
    path = outbox / f"{key}.eml"
    partial = path.with_suffix(".tmp")
    partial.write_bytes(bytes(message))
    partial.replace(path)
    return path


def capture_payment(order_id: int, attempt: int, failure_rate: float) -> Receipt:
    """Ask the provider to capture an order's payment.

    The outcome of each attempt is drawn from (order, attempt), so a run can be repeated.
    The simulated outages last at most three attempts: the demo ends green, while a real
    provider makes no such promise, which is what max_attempts and the dead state are for.
    """
    if order_id <= 0:
        raise UnknownOrder(f"order {order_id} does not exist")
    draw = random.Random(f"{order_id}:{attempt}").random()
    time.sleep(0.02 + draw * 0.05)  # the provider's latency
    if attempt <= 3 and draw < failure_rate:
        raise ProviderUnavailable(f"503 from the payment provider (order {order_id})")
    return Receipt(order_id=order_id, status="captured")
