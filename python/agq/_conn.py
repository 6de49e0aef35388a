"""Connections to agq and the calls every part of the package makes."""
from __future__ import annotations

import random
import threading
from typing import Any, Dict, Optional

import redis

from .errors import translate

DEFAULT_ADDR = "127.0.0.1:6380"


def connect(addr: str, username: Optional[str], key: str, *, socket_timeout: Optional[float],
            single: bool = False, options: Optional[Dict[str, Any]] = None,
            namespace: Optional[str] = None) -> redis.Redis:
    """A redis-py client of agq at addr ("host:port"), authenticated with
    key (as username's, when given). options are more redis.Redis keyword
    arguments (ssl=True, ssl_ca_certs=..., ...). With namespace, each
    connection moves there when it opens (a cluster admin's key; a key
    bound to a namespace may only name its own). It never retries on its
    own: the callers decide what a lost connection means."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"agq address {addr!r} is not host:port")
    kwargs: Dict[str, Any] = dict(
        host=host.strip("[]") or "127.0.0.1", port=int(port), username=username, password=key,
        decode_responses=True, socket_timeout=socket_timeout, socket_connect_timeout=10,
        single_connection_client=single, client_name=username,
    )
    if namespace:
        def enter(conn: Any) -> None:
            conn.on_connect()
            conn.send_command("NAMESPACE", namespace)
            conn.read_response()
        kwargs["redis_connect_func"] = enter
    kwargs.update(options or {})
    return redis.Redis(**kwargs)


def call(client: redis.Redis, *args: Any) -> Any:
    """Sends one command; an error reply raises its ReplyError subclass."""
    try:
        return client.execute_command(*args)
    except (redis.ResponseError, redis.AuthenticationError) as e:
        raise translate(e) from e


class Backoff:
    """Waits after connection trouble: low doubling to high, back to low
    after a success, never longer than limit() when given, with 10%
    jitter so that many workers do not come back at once."""

    def __init__(self, low: float, high: float, limit: Any = None) -> None:
        self.low, self.high, self.limit = low, high, limit
        self.cur = 0.0

    def next(self) -> float:
        d = self.cur or self.low
        self.cur = min(2 * d, self.high)
        d = min(d, self.high)
        if self.limit is not None:
            d = min(d, self.limit())
        return d * random.uniform(0.9, 1.0)

    def reset(self) -> None:
        self.cur = 0.0


def wait(stop: threading.Event, seconds: float) -> bool:
    """Sleeps seconds unless stop is set first; True when it slept it all."""
    return not stop.wait(max(seconds, 0))
