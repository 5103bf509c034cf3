"""Typed Python functions as engine tools (``[[tools.python]]`` in the config).

A function's JSON schema comes from its signature through pydantic: one model field per
parameter (its annotation and default), described by the docstring's ``Args:`` section;
the docstring's first paragraph describes the tool. Arguments are validated against the
same model before the call, so a wrong argument is a tool error the LLM reads, naming it.

An ``async def`` runs on the engine's loop and is cancelled by a timeout or an interrupt;
a plain ``def`` runs in a thread of its own so it cannot stall the loop. Python cannot stop
a thread, so after a timeout or an interrupt the run moves on while the thread finishes on
its own and its result is dropped. That thread is a daemon, not one of
``asyncio.to_thread``'s pool: a function that never returns would otherwise hold a pool
worker (the pool is shared and small) and delay the engine's exit, which joins the pool.
Such *stranded* threads are counted per tool (:class:`ToolThreads`): with
``max_stranded_calls`` of them still running, a new call is refused instead of adding one
more thread that may never end.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import importlib
import inspect
import logging
import os
import re
import sys
import threading
import typing
from collections.abc import Callable, Iterable
from typing import Any

import pydantic
import pydantic_core

from agentik.config import DEFAULT_MAX_STRANDED_CALLS, PythonToolConfig
from engine_service.core.models import JSON
from engine_service.core.registry import ToolRegistry
from engine_service.core.tool import Tool, ToolContext, ToolError, ToolResult

__all__ = [
    "PythonTool",
    "PythonToolLoadError",
    "ToolThreads",
    "load_python_tool",
    "register_python_tools",
]

log = logging.getLogger(__name__)

SOURCE = "python"

_ARGS_HEADERS = ("args:", "arguments:", "parameters:")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class PythonToolLoadError(ValueError):
    """A configured function cannot become a tool; the message names the entry."""


class PythonTool(Tool):
    """One Python function the LLM may call."""

    source = SOURCE

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        max_stranded_calls: int = DEFAULT_MAX_STRANDED_CALLS,
    ) -> None:
        self.function = function
        self.name = name or function.__name__
        summary, arg_docs = parse_docstring(inspect.getdoc(function) or "")
        self.description = description or summary or f"Call {function.__qualname__}."
        self.timeout = timeout
        self._model = _arguments_model(function, arg_docs)
        self._is_async = inspect.iscoroutinefunction(function)
        self.parameters = _schema(self._model)
        self.threads = ToolThreads(self.name, max_stranded_calls)

    async def call(self, arguments: dict[str, JSON], context: ToolContext) -> ToolResult:
        try:
            validated = self._model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            raise ToolError(_validation_message(exc)) from None
        kwargs = {
            info.alias or field: getattr(validated, field)
            for field, info in type(validated).model_fields.items()
        }
        try:
            if self._is_async:
                value = await self.function(**kwargs)
            else:
                value = await self.threads.run(self.function, kwargs)
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc
        return ToolResult(_text(value))


@dataclasses.dataclass(slots=True)
class _Thread:
    """One call's thread, as its tool counts it."""

    returned: bool = False
    stranded: bool = False
    """Its caller stopped waiting (a timeout or an interrupt) before it returned."""


class ToolThreads:
    """The threads of one plain-``def`` tool's calls, and how many are stranded.

    A call runs ``function(**kwargs)`` in a daemon thread of its own. When the caller stops
    waiting first (a timeout or an interrupt), the thread runs on, since Python cannot stop
    it, and counts as stranded until the function returns. While ``limit`` threads are
    stranded, a new call is refused with a ``ToolError`` and starts nothing: a function that
    hangs (a socket read without a timeout, a lock) cannot pile up threads call after call.
    The count is kept under a lock: the threads end on their own, off the event loop.
    """

    def __init__(self, tool: str, limit: int) -> None:
        self.tool = tool
        self.limit = limit
        self._stranded = 0
        self._lock = threading.Lock()

    @property
    def stranded(self) -> int:
        """Threads still running whose caller stopped waiting."""
        return self._stranded

    async def run(self, function: Callable[..., Any], kwargs: dict[str, Any]) -> object:
        """``function(**kwargs)`` in a daemon thread, with the caller's context variables."""
        with self._lock:
            stranded = self._stranded
        if stranded >= self.limit:
            raise ToolError(self._refusal(stranded))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[object] = loop.create_future()
        context = contextvars.copy_context()
        thread = _Thread()

        def settle(value: object, error: BaseException | None) -> None:
            if future.done():  # cancelled: a timeout or an interrupt came first
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(value)

        def work() -> None:
            value: object = None
            error: BaseException | None = None
            try:
                value = context.run(function, **kwargs)
            except BaseException as exc:  # handed to the awaiting task
                error = exc
            self._returned(thread)
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(settle, value, error)

        threading.Thread(target=work, name=f"python-tool-{self.tool}", daemon=True).start()
        try:
            return await future
        except asyncio.CancelledError:
            self._strand(thread)
            raise

    def _strand(self, thread: _Thread) -> None:
        with self._lock:
            if thread.returned:
                return
            thread.stranded = True
            self._stranded += 1
            stranded = self._stranded
        if stranded == self.limit:  # once each time the count reaches the limit
            log.warning(
                "python tool %r: %s still running after a timeout or an interrupt "
                "([[tools.python]] max_stranded_calls = %d); new calls are refused until one "
                "returns",
                self.tool,
                _calls_are(stranded),
                self.limit,
            )

    def _returned(self, thread: _Thread) -> None:
        with self._lock:
            thread.returned = True
            if not thread.stranded:
                return
            self._stranded -= 1
            stranded = self._stranded
        if stranded == self.limit - 1:
            log.info(
                "python tool %r: a stranded call returned; calls are accepted again", self.tool
            )

    def _refusal(self, stranded: int) -> str:
        return (
            f"tool {self.tool!r} not started: {_calls_are(stranded, 'earlier ')} still running "
            f"after a timeout or an interrupt ([[tools.python]] max_stranded_calls = "
            f"{self.limit}); try again later"
        )


def _calls_are(count: int, which: str = "") -> str:
    return f"1 {which}call is" if count == 1 else f"{count} {which}calls are"


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph (one line) and ``{parameter: description}`` from ``Args:``."""
    lines = doc.strip().splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or line.strip().lower() in _ARGS_HEADERS:
            break
        summary.append(line.strip())
    args: dict[str, str] = {}
    inside = False
    current: str | None = None
    args_indent = 0
    for line in lines:
        stripped = line.strip()
        if stripped.lower() in _ARGS_HEADERS:
            inside, current = True, None
            continue
        if not inside:
            continue
        if not line.startswith((" ", "\t")):  # the next section or the end of Args
            if stripped:
                inside = False
            continue
        indent = len(line) - len(line.lstrip())
        match = _ARG_LINE.match(stripped)
        if match and (current is None or indent <= args_indent):
            current, args_indent = match[1], indent
            args[current] = match[2].strip()
        elif current is not None and stripped:
            args[current] = f"{args[current]} {stripped}".strip()
    return " ".join(summary), args


def _arguments_model(
    function: Callable[..., Any], arg_docs: dict[str, str]
) -> type[pydantic.BaseModel]:
    """A pydantic model with one field per parameter of ``function``."""
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception as exc:  # a forward reference that does not resolve
        raise PythonToolLoadError(f"its type hints cannot be resolved: {exc}") from None
    fields: dict[str, Any] = {}
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise PythonToolLoadError(
                f"parameter {parameter.name!r}: *args and **kwargs cannot be described to the LLM"
            )
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise PythonToolLoadError(f"parameter {parameter.name!r} is positional-only")
        if parameter.name not in hints:
            raise PythonToolLoadError(f"parameter {parameter.name!r} has no type annotation")
        default = ... if parameter.default is parameter.empty else parameter.default
        # The parameter's name is the field's alias: a field named after it could clash
        # with BaseModel's own attributes (``json``, ``model_config``) or start with "_".
        info = pydantic.Field(
            default, alias=parameter.name, description=arg_docs.get(parameter.name)
        )
        fields[f"p{len(fields)}"] = (hints[parameter.name], info)
    try:
        model: type[pydantic.BaseModel] = pydantic.create_model(
            f"{function.__name__}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid"),
            **fields,
        )
        model.model_json_schema()
    except pydantic.PydanticSchemaGenerationError as exc:
        raise PythonToolLoadError(f"unsupported parameter type: {_first_line(exc)}") from None
    except pydantic.PydanticUserError as exc:
        raise PythonToolLoadError(f"unsupported parameter: {_first_line(exc)}") from None
    return model


def _schema(model: type[pydantic.BaseModel]) -> dict[str, JSON]:
    schema: dict[str, JSON] = model.model_json_schema()
    schema.pop("title", None)
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for prop in properties.values():
            if isinstance(prop, dict):
                prop.pop("title", None)
    schema.setdefault("properties", {})
    return schema


def _validation_message(exc: pydantic.ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"])
        problems.append(f"argument {where!r}: {error['msg']}" if where else error["msg"])
    return "invalid arguments: " + "; ".join(problems)


def _text(value: object) -> str:
    """What the LLM reads: a string as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    try:
        return pydantic_core.to_json(value).decode()
    except pydantic_core.PydanticSerializationError as exc:
        raise ToolError(f"the function returned a value that is not JSON: {exc}") from None


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0]


def _import(module_name: str, directory: str) -> object:
    """The module; one not on the engine's path is looked for in ``directory`` (the config
    file's), which is then appended to ``sys.path``: last, so it shadows no installed
    module, and kept, so the module's own imports of its neighbours work too."""
    top = module_name.partition(".")[0]
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        beside = directory and (
            os.path.isfile(os.path.join(directory, f"{top}.py"))
            or os.path.isdir(os.path.join(directory, top))
        )
        if exc.name != top or not beside or directory in sys.path:
            raise
    sys.path.append(directory)
    importlib.invalidate_caches()
    log.info("[[tools.python]]: %r imported from the config file's directory %s", top, directory)
    return importlib.import_module(module_name)


def _not_found(module_name: str, exc: ModuleNotFoundError, directory: str) -> str:
    """Why ``module_name`` does not import, with where the engine looks when the module
    itself (not one of its own imports) is missing."""
    top = module_name.partition(".")[0]
    said = f"cannot import {module_name!r}: {exc}"
    if exc.name != top:
        return said
    beside = f" or beside the config file ({directory})" if directory else ""
    return (
        f"{said}; is {top!r} on the engine's PYTHONPATH{beside}? The working directory is "
        "not searched: start the engine with PYTHONPATH=. (or the module's directory), "
        "or install the module"
    )


def _resolve(reference: str, directory: str) -> object:
    module_name, _, attributes = reference.partition(":")
    try:
        target: object = _import(module_name, directory)
    except ModuleNotFoundError as exc:
        raise PythonToolLoadError(_not_found(module_name, exc, directory)) from None
    except Exception as exc:
        raise PythonToolLoadError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    path = module_name
    for attribute in attributes.split("."):
        try:
            target = getattr(target, attribute)
        except AttributeError:
            raise PythonToolLoadError(f"{path!r} has no attribute {attribute!r}") from None
        path = f"{path}.{attribute}"
    return target


def load_python_tool(config: PythonToolConfig) -> PythonTool:
    """Import and describe the function ``config`` names; ``PythonToolLoadError`` if unusable."""
    try:
        function = _resolve(config.function, config.directory)
        if not (inspect.isfunction(function) or inspect.ismethod(function)):
            kind = type(function).__name__
            raise PythonToolLoadError(f"{config.function!r} is not a function (it is a {kind})")
        tool = PythonTool(
            function,
            name=config.name,
            description=config.description,
            timeout=config.timeout,
            max_stranded_calls=config.max_stranded_calls,
        )
        if not _TOOL_NAME.match(tool.name):
            raise PythonToolLoadError(
                f"{tool.name!r} is not a tool name (1 to 64 of A-Z a-z 0-9 _ -); set 'name'"
            )
        return tool
    except PythonToolLoadError as exc:
        raise PythonToolLoadError(f"{config.label} ({config.function}): {exc}") from None


def register_python_tools(configs: Iterable[PythonToolConfig], registry: ToolRegistry) -> None:
    """Load every configured function into ``registry``; a taken name is an error."""
    for config in configs:
        tool = load_python_tool(config)
        try:
            registry.register(tool)
        except ValueError as exc:
            raise PythonToolLoadError(f"{config.label} ({config.function}): {exc}") from None
