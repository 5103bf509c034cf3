"""Harmless native tools: the time, arithmetic and the session's shared state.

``calculate`` never evaluates Python: it parses the expression with :mod:`ast` and
walks a whitelist of node kinds (numbers, arithmetic operators, a few ``math``
functions and constants), refusing anything else and any result that would be huge.
"""

from __future__ import annotations

import ast
import copy
import json
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from engine_service.core.errors import InvalidInput
from engine_service.core.events import StateDelta, StateSnapshot
from engine_service.core.jsonpatch import JsonPatchError, apply_patch
from engine_service.core.models import JSON
from engine_service.core.state import check_state
from engine_service.core.tool import Tool, ToolContext, ToolError, ToolResult

__all__ = [
    "CalculateTool",
    "CurrentTimeTool",
    "MAX_EXPRESSION_CHARS",
    "MAX_INT_BITS",
    "UpdateStateTool",
    "builtin_tools",
    "evaluate",
]

MAX_EXPRESSION_CHARS = 500
"""The longest expression ``calculate`` accepts."""
MAX_INT_BITS = 4096
"""The largest integer ``calculate`` computes (about 1233 decimal digits)."""
_MAX_TZ_CHARS = 64


def _dumps(value: JSON) -> str:
    return json.dumps(value, ensure_ascii=False)


# --- current_time -------------------------------------------------------------------


class CurrentTimeTool(Tool):
    """The current date and time in an IANA time zone."""

    name = "current_time"
    description = (
        "Get the current date and time. Optionally pass an IANA time zone name such as "
        "'Europe/Berlin' or 'America/New_York' (default UTC)."
    )

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self._clock = clock or (lambda: datetime.now(UTC))
        self.parameters = {
            "type": "object",
            "properties": {
                "timezone": {
                    "type": "string",
                    "description": "IANA time zone name, e.g. 'Asia/Tokyo'. Defaults to 'UTC'.",
                }
            },
            "additionalProperties": False,
        }

    async def call(self, arguments: dict[str, JSON], context: ToolContext) -> ToolResult:
        key = arguments.get("timezone")
        if key is None or key == "":
            key = "UTC"
        if not isinstance(key, str):
            raise ToolError("'timezone' must be a string such as 'Europe/Berlin'")
        zone = _zone(key)
        now = self._clock().astimezone(zone)
        result = {
            "timezone": key,
            "datetime": now.isoformat(timespec="seconds"),
            "weekday": _WEEKDAYS[now.weekday()],
            "utc_offset": _offset(now),
        }
        return ToolResult(_dumps(result))


_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _offset(moment: datetime) -> str:
    """``moment``'s UTC offset as ``+HH:MM``."""
    minutes = int((moment.utcoffset() or timedelta()).total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _zone(key: str) -> tzinfo:
    """The time zone called ``key``; UTC works even without a tz database installed."""
    if key in ("UTC", "Etc/UTC"):
        return UTC
    if len(key) > _MAX_TZ_CHARS:
        raise ToolError("unknown time zone (name too long); use an IANA name like 'Europe/Berlin'")
    try:
        return ZoneInfo(key)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ToolError(
            f"unknown time zone {key!r}; use an IANA name like 'Europe/Berlin' or 'UTC'"
        ) from None


# --- calculate ----------------------------------------------------------------------

Number = int | float

_MAX_ROUND_DIGITS = 400

_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _round(x: Number, ndigits: Number | None = None) -> Number:
    if ndigits is None:
        return round(x)
    if isinstance(ndigits, float):
        raise ToolError("round(): the number of digits must be a whole number")
    if abs(ndigits) > _MAX_ROUND_DIGITS:
        raise ToolError(f"round(): the number of digits must be within ±{_MAX_ROUND_DIGITS}")
    return round(x, ndigits)


def _log(x: Number, base: Number | None = None) -> float:
    return math.log(x) if base is None else math.log(x, base)


_FUNCTIONS: dict[str, tuple[Callable[..., Number], int, int]] = {
    # name: (function, fewest arguments, most arguments)
    "abs": (abs, 1, 1),
    "round": (_round, 1, 2),
    "sqrt": (math.sqrt, 1, 1),
    "floor": (math.floor, 1, 1),
    "ceil": (math.ceil, 1, 1),
    "exp": (math.exp, 1, 1),
    "log": (_log, 1, 2),
    "log10": (math.log10, 1, 1),
    "log2": (math.log2, 1, 1),
    "sin": (math.sin, 1, 1),
    "cos": (math.cos, 1, 1),
    "tan": (math.tan, 1, 1),
    "asin": (math.asin, 1, 1),
    "acos": (math.acos, 1, 1),
    "atan": (math.atan, 1, 1),
    "degrees": (math.degrees, 1, 1),
    "radians": (math.radians, 1, 1),
    "min": (min, 1, 50),
    "max": (max, 1, 50),
}

_OPERATOR_NAMES: dict[type[ast.AST], str] = {
    ast.BitXor: "'^' (use ** for powers)",
    ast.BitAnd: "'&'",
    ast.BitOr: "'|'",
    ast.LShift: "'<<'",
    ast.RShift: "'>>'",
    ast.MatMult: "'@'",
    ast.Invert: "'~'",
    ast.Not: "'not'",
}

_NODE_NAMES: dict[type[ast.AST], str] = {
    ast.Attribute: "attribute access",
    ast.Subscript: "indexing",
    ast.Compare: "comparisons",
    ast.BoolOp: "'and'/'or'",
    ast.Lambda: "lambda",
    ast.Tuple: "tuples",
    ast.List: "lists",
    ast.Dict: "dicts",
    ast.Set: "sets",
    ast.ListComp: "comprehensions",
    ast.GeneratorExp: "comprehensions",
    ast.IfExp: "conditional expressions",
    ast.NamedExpr: "assignment",
    ast.JoinedStr: "strings",
    ast.Starred: "'*' unpacking",
}


def _checked(value: Number) -> Number:
    """``value`` if it is a finite float or an int of at most ``MAX_INT_BITS`` bits."""
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ToolError(f"the result is too large (more than {MAX_INT_BITS} bits)")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("the result is too large (not a finite number)")
    return value


def _power(base: Number, exponent: Number) -> Number:
    # |base| ** exponent has at least (bit_length - 1) * exponent + 1 bits.
    if (
        isinstance(base, int)
        and isinstance(exponent, int)
        and exponent > 0
        and (base.bit_length() - 1) * exponent + 1 > MAX_INT_BITS
    ):
        raise ToolError(f"the power {base}**{exponent} is too large to compute")
    result = base**exponent
    if isinstance(result, complex):
        raise ToolError("the power has no real result (a negative number to a fractional power)")
    return result


def _binary(op: ast.operator, left: Number, right: Number) -> Number:
    if isinstance(op, ast.Add):
        return left + right
    if isinstance(op, ast.Sub):
        return left - right
    if isinstance(op, ast.Mult):
        return left * right
    if isinstance(op, ast.Div):
        return left / right
    if isinstance(op, ast.FloorDiv):
        return left // right
    if isinstance(op, ast.Mod):
        return left % right
    if isinstance(op, ast.Pow):
        return _power(left, right)
    raise ToolError(
        f"the operator {_OPERATOR_NAMES.get(type(op), type(op).__name__)} is not allowed"
    )


def _call(node: ast.Call) -> Number:
    if not isinstance(node.func, ast.Name):
        raise ToolError("only the listed math functions can be called")
    name = node.func.id
    spec = _FUNCTIONS.get(name)
    if spec is None:
        raise ToolError(f"unknown function {name!r}; allowed: {', '.join(sorted(_FUNCTIONS))}")
    function, fewest, most = spec
    if node.keywords:
        raise ToolError(f"{name}() takes no keyword arguments")
    if not fewest <= len(node.args) <= most:
        wanted = str(fewest) if fewest == most else f"{fewest} to {most}"
        raise ToolError(f"{name}() takes {wanted} argument(s), got {len(node.args)}")
    return function(*[_eval(arg) for arg in node.args])


def _eval(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ToolError(f"only numbers are allowed, not {value!r}")
        return _checked(value)
    if isinstance(node, ast.BinOp):
        return _checked(_binary(node.op, _eval(node.left), _eval(node.right)))
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand)
        if isinstance(node.op, ast.USub):
            return -operand
        if isinstance(node.op, ast.UAdd):
            return +operand
        op_name = _OPERATOR_NAMES.get(type(node.op), type(node.op).__name__)
        raise ToolError(f"the operator {op_name} is not allowed")
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise ToolError(f"unknown name {node.id!r}; the only constants are {', '.join(_CONSTANTS)}")
    if isinstance(node, ast.Call):
        return _checked(_call(node))
    what = _NODE_NAMES.get(type(node), type(node).__name__)
    raise ToolError(f"{what} not allowed: only numbers, + - * / // % **, and math functions")


def evaluate(expression: str) -> Number:
    """Evaluate an arithmetic expression safely; raise ``ToolError`` saying what is wrong."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    if not expression.strip():
        raise ToolError("the expression is empty")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"not a valid arithmetic expression: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise ToolError("the expression is too deeply nested or malformed") from None
    try:
        result = _eval(tree.body)
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except OverflowError:
        raise ToolError("the result is too large") from None
    except RecursionError:
        raise ToolError("the expression is too deeply nested") from None
    except (ValueError, TypeError) as exc:
        raise ToolError(f"math error: {exc}") from None
    return result


class CalculateTool(Tool):
    """Arithmetic without running code."""

    name = "calculate"
    description = (
        "Evaluate an arithmetic expression exactly and return the number. Supports "
        "+ - * / // % ** and parentheses, the constants pi, e and tau, and the functions "
        + ", ".join(sorted(_FUNCTIONS))
        + ". Example: 'sqrt(2) * (3 + 4) ** 2'."
    )

    def __init__(self) -> None:
        self.parameters = {
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "description": "The arithmetic expression, e.g. '(17 * 23) / 4'.",
                }
            },
            "required": ["expression"],
            "additionalProperties": False,
        }

    async def call(self, arguments: dict[str, JSON], context: ToolContext) -> ToolResult:
        expression = arguments.get("expression")
        if not isinstance(expression, str):
            raise ToolError("'expression' is required and must be a string")
        result = evaluate(expression)
        return ToolResult(_dumps({"expression": expression, "result": result}))


# --- update_state -------------------------------------------------------------------


class UpdateStateTool(Tool):
    """Lets the LLM replace or patch the session's shared (AG-UI) state."""

    name = "update_state"
    description = (
        "Change the shared state of this conversation, which the user's app can see. "
        "Pass either 'state' (a whole new JSON object replacing the state) or 'patch' "
        "(a list of RFC 6902 JSON Patch operations, e.g. "
        '[{"op": "replace", "path": "/count", "value": 3}]). Returns the new state.'
    )

    def __init__(self) -> None:
        self.parameters = {
            "type": "object",
            "properties": {
                "state": {"type": "object", "description": "The complete new state."},
                "patch": {
                    "type": "array",
                    "description": "RFC 6902 JSON Patch operations applied to the current state.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "op": {
                                "type": "string",
                                "enum": ["add", "remove", "replace", "move", "copy", "test"],
                            },
                            "path": {"type": "string"},
                            "from": {"type": "string"},
                            "value": {},
                        },
                        "required": ["op", "path"],
                    },
                },
            },
            "additionalProperties": False,
        }

    async def call(self, arguments: dict[str, JSON], context: ToolContext) -> ToolResult:
        has_state = "state" in arguments
        has_patch = "patch" in arguments
        if has_state == has_patch:
            raise ToolError("pass exactly one of 'state' (a whole new object) or 'patch'")
        limit = context.max_state_bytes
        if has_state:
            new_state = arguments["state"]
            if not isinstance(new_state, dict):
                raise ToolError("'state' must be a JSON object")
            if limit is not None:
                try:
                    check_state(new_state, limit)
                except InvalidInput as exc:
                    raise ToolError(f"the state is unchanged: {exc.message}") from None
            context.set_state(new_state)
            context.emit(StateSnapshot(snapshot=copy.deepcopy(new_state)))
            return ToolResult(_dumps({"state": new_state}))

        ops = arguments["patch"]
        if not isinstance(ops, list):
            raise ToolError("'patch' must be a list of JSON Patch operations")
        current = context.get_state()
        # A session without state yet patches an empty object; clients get the whole
        # result then, since they have nothing to apply a delta to.
        base: JSON = {} if current is None else current
        try:
            new_state = apply_patch(base, ops, max_bytes=limit)
        except JsonPatchError as exc:
            raise ToolError(f"the patch was not applied, the state is unchanged: {exc}") from None
        context.set_state(new_state)
        if current is None:
            context.emit(StateSnapshot(snapshot=copy.deepcopy(new_state)))
        else:
            context.emit(StateDelta(delta=copy.deepcopy(ops)))
        return ToolResult(_dumps({"state": new_state}))


def builtin_tools() -> list[Tool]:
    """A fresh instance of every built-in tool."""
    return [CurrentTimeTool(), CalculateTool(), UpdateStateTool()]
