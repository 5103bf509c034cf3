"""A2A push notification configs over the engine (``SetPushConfig`` and the rest).

The configs are the engine's, scoped like tasks (a task the caller cannot see is
TaskNotFound); the engine checks the URL (its SSRF guard: a refused one is InvalidParams
naming why) and bounds how many a task holds. The engine also makes the deliveries
(``engine_service.webhooks.a2a_push``): every status and artifact update of the task, to
each config, with its ``token`` and ``authentication``.
"""

from __future__ import annotations

import grpc
from a2a.types import (
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import A2AError, TaskNotFoundError

from agentik.a2a.rules import a2a_push_config, check_task_id
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from web_facade.a2a.errors import from_rpc
from web_facade.engine_client import UNARY_TIMEOUT

__all__ = ["PushConfigService"]


def _refused(task_id: str, exc: grpc.RpcError) -> A2AError:
    if exc.code() == grpc.StatusCode.NOT_FOUND:
        return TaskNotFoundError(str(exc.details() or f"task {task_id!r} not found"))
    return from_rpc(exc)


class PushConfigService:
    """The four push config methods, one engine call each."""

    def __init__(self, engine: pb_grpc.AgentEngineStub) -> None:
        self._engine = engine

    def create(self, config: TaskPushNotificationConfig) -> TaskPushNotificationConfig:
        check_task_id(config.task_id)
        request = pb.PushConfig(
            id=config.id,
            task_id=config.task_id,
            url=config.url,
            token=config.token,
            auth_scheme=config.authentication.scheme,
            auth_credentials=config.authentication.credentials,
        )
        try:
            made = self._engine.SetPushConfig(
                pb.SetPushConfigRequest(config=request), timeout=UNARY_TIMEOUT
            )
        except grpc.RpcError as exc:
            raise _refused(config.task_id, exc) from None
        return a2a_push_config(made)

    def get(self, query: GetTaskPushNotificationConfigRequest) -> TaskPushNotificationConfig:
        check_task_id(query.task_id)
        try:
            found = self._engine.GetPushConfig(
                pb.GetPushConfigRequest(task_id=query.task_id, id=query.id),
                timeout=UNARY_TIMEOUT,
            )
        except grpc.RpcError as exc:
            raise _refused(query.task_id, exc) from None
        return a2a_push_config(found)

    def list(
        self, query: ListTaskPushNotificationConfigsRequest
    ) -> ListTaskPushNotificationConfigsResponse:
        check_task_id(query.task_id)
        try:
            page = self._engine.ListPushConfigs(
                pb.ListPushConfigsRequest(task_id=query.task_id), timeout=UNARY_TIMEOUT
            )
        except grpc.RpcError as exc:
            raise _refused(query.task_id, exc) from None
        # Every config of a task fits one page ([webhooks] max_push_configs bounds them).
        return ListTaskPushNotificationConfigsResponse(
            configs=[a2a_push_config(c) for c in page.configs]
        )

    def delete(self, query: DeleteTaskPushNotificationConfigRequest) -> None:
        check_task_id(query.task_id)
        try:
            self._engine.DeletePushConfig(
                pb.DeletePushConfigRequest(task_id=query.task_id, id=query.id),
                timeout=UNARY_TIMEOUT,
            )
        except grpc.RpcError as exc:
            raise _refused(query.task_id, exc) from None
