"""The memory store's webhook outbox (``core.deliveries``: deliveries added, claimed under a
lease, settled) and the A2A push configs of each task."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from engine_service.core.deliveries import Delivery, DeliveryStatus, PushConfig
from engine_service.core.errors import InvalidInput
from engine_service.stores.encoding import utc
from engine_service.stores.memory.dicts import MemoryDicts
from engine_service.stores.memory.entry import page_limit

__all__ = ["MemoryDeliveries", "copy_delivery"]


def copy_delivery(delivery: Delivery) -> Delivery:
    """A copy of ``delivery`` that shares no headers with the one the store holds."""
    return replace(delivery, headers=dict(delivery.headers))


class MemoryDeliveries(MemoryDicts):
    """The outbox and the push configs, a part of ``MemorySessionStore``."""

    async def add_delivery(self, delivery: Delivery) -> None:
        if delivery.session_id and delivery.session_id not in self._sessions:
            return  # its conversation is gone, and its deliveries with it
        if delivery.id not in self._deliveries:
            self._deliveries[delivery.id] = (copy_delivery(delivery), "", None)

    async def claim_deliveries(
        self, replica: str, now: datetime, until: datetime, limit: int
    ) -> list[Delivery]:
        now, until = utc(now, "now"), utc(until, "until")
        due = [
            held
            for held, _, lease in self._deliveries.values()
            if held.status is DeliveryStatus.PENDING
            and held.next_attempt_at <= now
            and (lease is None or lease < now)
        ]
        due.sort(key=lambda d: (d.next_attempt_at, d.created_at, d.id))
        claimed = due[: page_limit(limit)]
        for delivery in claimed:
            delivery.attempts += 1  # the claim counts the attempt
            self._deliveries[delivery.id] = (delivery, replica, until)
        return [copy_delivery(delivery) for delivery in claimed]

    async def settle_delivery(self, replica: str, delivery: Delivery, now: datetime) -> bool:
        held = self._deliveries.get(delivery.id)
        if held is None or held[1] != replica:
            return False
        settled = copy_delivery(delivery)
        settled.updated_at = utc(now, "now")
        self._deliveries[delivery.id] = (settled, "", None)
        return True

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        held = self._deliveries.get(delivery_id)
        return copy_delivery(held[0]) if held else None

    async def failed_deliveries(self, offset: int, limit: int) -> tuple[list[Delivery], int]:
        if offset < 0:
            raise InvalidInput("offset must not be negative")
        failed = [d for d, _, _ in self._deliveries.values() if d.status is DeliveryStatus.FAILED]
        failed.sort(key=lambda d: (d.updated_at or d.created_at, d.id), reverse=True)
        end = offset + limit if page_limit(limit) else None
        return [copy_delivery(d) for d in failed[offset:end]], len(failed)

    async def add_push_config(self, config: PushConfig, limit: int) -> PushConfig:
        self._entry(config.session_id)
        key = (config.task_id, config.id)
        if key not in self._push and len(await self.push_configs(config.task_id)) >= limit:
            raise InvalidInput(f"the task has {limit} push notification configs, the most it may")
        self._push.pop(key, None)
        self._push[key] = config
        return config

    async def push_configs(self, task_id: str) -> list[PushConfig]:
        return [c for (task, _), c in self._push.items() if task == task_id]

    async def session_push_configs(self, session_id: str) -> list[PushConfig]:
        return [c for c in self._push.values() if c.session_id == session_id]

    async def delete_push_config(self, task_id: str, config_id: str) -> bool:
        return self._push.pop((task_id, config_id), None) is not None
