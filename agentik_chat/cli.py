"""``agentik chat``: the subcommand, interactive on a terminal, one message when piped.

``agentik.cli`` calls :func:`add_command`; nothing heavy is imported until the command
runs (the parser is built for every ``agentik`` command).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentik_chat.api import AgentikClient
    from agentik_chat.session import ChatSession

__all__ = ["EXIT_INPUT_REQUIRED", "EXIT_INTERRUPTED", "EXIT_USAGE", "add_command"]

EXIT_USAGE = 2
"""Nothing to send (empty stdin)."""
EXIT_INPUT_REQUIRED = 3
"""Piped: the turn stopped to wait for a person's approval or answer."""
EXIT_INTERRUPTED = 130
"""Quit with Ctrl-C (128 + SIGINT, as shells report it)."""

HELP = """\
commands:
  /list         your conversations, most recent first (* marks the current one)
  /switch ID    continue conversation ID (a unique prefix of an id in /list will do);
                /switch alone lists them
  /new          the next message starts a new conversation
  /agents       the agents of the server (* marks the one new conversations talk to);
                /agents NAME: new conversations talk to NAME from now on
  /help         this text
  /quit         leave (Ctrl-D too)
Ctrl-C interrupts the turn in flight; Ctrl-C again, or at the prompt, quits.
A line starting with // sends the rest with one / (/ is for commands)."""


def add_command(subparsers: Any) -> None:
    """Add ``chat`` to the ``agentik`` command."""
    chat = subparsers.add_parser(
        "chat",
        help="chat with a running agentik from the terminal (reads stdin when piped)",
        description="Chat with the agent over the /agentik API. Interactive on a terminal; "
        "when stdin is not a terminal, sends all of it as one message, prints the answer "
        f"and exits (exit {EXIT_INPUT_REQUIRED} when the agent waits for a person).",
    )
    chat.add_argument(
        "--url",
        help="the web facade, http://HOST:PORT or HOST:PORT (default: http:// + the "
        "[web] http_addr of --config, else $AGENTIK_HTTP_ADDR, else 127.0.0.1:8000)",
    )
    chat.add_argument("--token", help="bearer token (default: $AGENTIK_TOKEN)")
    chat.add_argument(
        "--agent",
        metavar="NAME",
        default="",
        help="the agent a new conversation talks to (default: the server's default agent; "
        "/agents lists them); a conversation keeps its agent",
    )
    which = chat.add_mutually_exclusive_group()
    which.add_argument(
        "--conversation",
        metavar="ID",
        help="continue this conversation (a unique prefix of its id will do)",
    )
    which.add_argument(
        "--continue",
        dest="resume_last",
        action="store_true",
        help="continue the last conversation used with this server "
        "(kept in $XDG_STATE_HOME/agentik/chat.json)",
    )
    chat.set_defaults(handler=_chat)


def _chat(args: argparse.Namespace) -> int:
    from agentik_chat.api import AgentikClient, ChatError

    token, source = (args.token, "--token") if args.token else (None, "")
    if token is None and os.environ.get("AGENTIK_TOKEN"):
        token, source = os.environ["AGENTIK_TOKEN"], "AGENTIK_TOKEN"
    url = _facade_url(args)
    if url is None:
        return EXIT_USAGE
    client = AgentikClient(url, token, source)
    try:
        conversation_id = _chosen_conversation(client, args)
        if args.agent:
            _check_agent(client, args.agent)
        if sys.stdin.isatty():
            return _interactive(client, conversation_id, args.agent)
        return _piped(client, conversation_id, sys.stdin.read(), args.agent)
    except ChatError as exc:
        print(f"agentik: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return EXIT_INTERRUPTED
    except EOFError:  # Ctrl-D at a question: leave, the conversation keeps waiting
        print()
        return 0
    finally:
        client.close()


def _facade_url(args: argparse.Namespace) -> str | None:
    """Where the facade is: ``--url`` (``HOST:PORT``, as ``AGENTIK_HTTP_ADDR`` is written,
    gets ``http://``), else the ``[web] http_addr`` of ``--config``, else the environment's.
    None (said on stderr) when ``--url`` is not HTTP or the config cannot be read."""
    from agentik_chat.api import default_url

    if args.url:
        scheme, sep, _ = args.url.strip().partition("://")
        if not sep:
            return f"http://{args.url.strip()}"
        if scheme.lower() in ("http", "https"):
            return str(args.url.strip())
        print(f"agentik: --url {args.url!r} is not an http:// or https:// URL", file=sys.stderr)
        return None
    if not args.config:  # the client needs no engine setting: only a named file is read
        return default_url(os.environ)
    from agentik.config import ConfigError, load_settings

    try:
        settings = load_settings(args.config, os.environ, mcp=False)
    except ConfigError as exc:
        print(f"agentik: configuration error: {exc}", file=sys.stderr)
        return None
    return default_url({"AGENTIK_HTTP_ADDR": settings.web.http_addr})


def _chosen_conversation(client: AgentikClient, args: argparse.Namespace) -> str | None:
    """The conversation ``--conversation`` (an id or a unique prefix) or ``--continue``
    names; None for a new one."""
    from agentik_chat.api import EXIT_ERROR, ChatError
    from agentik_chat.last import last_conversation, state_file

    if args.resume_last:
        last = last_conversation(client.url)
        if last is None:
            raise ChatError(
                f"no last conversation with {client.url} (in {state_file(os.environ)}): "
                "start one without --continue",
                EXIT_ERROR,
            )
        return last
    if args.conversation:
        return str(find_conversation(client, args.conversation)["id"])
    return None


def find_conversation(client: AgentikClient, wanted: str) -> dict[str, Any]:
    """The conversation with the id ``wanted``, else the one whose id starts with it."""
    from agentik_chat.api import ChatError, Unreachable

    try:
        return client.conversation(wanted)
    except Unreachable:
        raise
    except ChatError:
        matches = [c for c in client.conversations(limit=1000) if c["id"].startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    many = f"{len(matches)} conversations start with {wanted!r}" if matches else ""
    raise ChatError(
        f"{many or f'no conversation matches {wanted!r}'}: "
        "`agentik chat` then /list shows them (give more of the id)"
    )


def _check_agent(client: AgentikClient, agent: str) -> None:
    from agentik_chat.api import ChatError

    names = [str(a["name"]) for a in client.agents()]
    if agent not in names:
        raise ChatError(f"the server has no agent {agent!r}; its agents: {', '.join(names)}")


def _session(
    client: AgentikClient, conversation_id: str | None, *, piped: bool, agent: str = ""
) -> ChatSession:
    from agentik_chat.render import Renderer
    from agentik_chat.session import ChatSession

    aside = sys.stderr if piped else sys.stdout
    color = aside.isatty() and not os.environ.get("NO_COLOR")
    return ChatSession(client, Renderer(sys.stdout, aside, color=color), conversation_id, agent)


def _piped(client: AgentikClient, conversation_id: str | None, text: str, agent: str = "") -> int:
    from agentik_chat.session import describe

    if not text.strip():
        print("agentik: nothing to send: stdin was empty", file=sys.stderr)
        return EXIT_USAGE
    session = _session(client, conversation_id, piped=True, agent=agent)
    waiting = session.pending()  # an unknown --conversation stops here, named
    result = session.send(text.rstrip("\n")) if not waiting else None
    if result is not None and result.outcome == "input_required":
        waiting = result.interrupts
    if waiting:
        _remember(session)
        print(
            f"agentik: conversation {session.conversation_id} waits for a person:", file=sys.stderr
        )
        for interrupt in waiting:
            print(f"  {describe(interrupt)}", file=sys.stderr)
        print(
            f"answer with: agentik chat --conversation {session.conversation_id}",
            file=sys.stderr,
        )
        return EXIT_INPUT_REQUIRED
    assert result is not None
    _said_conversation(session)
    if result.outcome == "ended":
        print("agentik: the turn ended out of sight: its messages tell how", file=sys.stderr)
    return {"success": 0, "interrupted": EXIT_INTERRUPTED}.get(result.outcome, 1)


def _said_conversation(session: ChatSession) -> None:
    """Piped: the conversation's id on stderr (stdout is the answer), and remembered for
    ``--continue``."""
    if session.conversation_id:
        print(
            f"agentik: conversation {session.conversation_id} "
            "(go on with: agentik chat --continue)",
            file=sys.stderr,
        )
    _remember(session)


def _remember(session: ChatSession) -> None:
    from agentik_chat.last import remember_conversation

    if session.conversation_id:
        remember_conversation(session.client.url, session.conversation_id)


def _interactive(client: AgentikClient, conversation_id: str | None, agent: str = "") -> int:
    with contextlib.suppress(ImportError):  # not on every platform; input() works without
        import readline  # noqa: F401  line editing and history for input()

    from agentik_chat.api import ChatError, WaitingForPerson

    session = _session(client, conversation_id, piped=False, agent=agent)
    waiting = session.pending()  # an unknown --conversation stops here, named
    where = f"conversation {conversation_id}" if conversation_id else "a new conversation"
    print(f"agentik chat at {client.url}, {where}. /help for commands.")
    _answer_pending(session, waiting)
    while True:
        try:
            line = input("> ")
        except EOFError:
            print()
            return 0
        text = line.strip()
        if not text:
            continue
        try:
            if text.startswith("/") and not text.startswith("//"):
                if _command(session, text) == "quit":
                    return 0
                continue
            result = session.send(text.removeprefix("/"))
            _remember(session)
            if result.outcome == "input_required":
                session.answer(result.interrupts, input)
        except WaitingForPerson:
            _answer_pending(session)
        except ChatError as exc:
            session.renderer.notice(f"agentik: {exc.message}")


def _answer_pending(session: ChatSession, waiting: list[dict[str, Any]] | None = None) -> None:
    """Ask the person what the conversation waits for, if anything, and resume."""
    if waiting is None:
        waiting = session.pending()
    if waiting:
        print("this conversation waits for you:")
        session.answer(waiting, input)


def _command(session: ChatSession, text: str) -> str | None:
    name, _, argument = text.partition(" ")
    argument = argument.strip()
    if name in ("/quit", "/exit", "/q"):
        return "quit"
    if name == "/help":
        print(HELP)
    elif name == "/new":
        session.conversation_id = None
        print("the next message starts a new conversation")
    elif name == "/list":
        _list(session)
    elif name == "/agents":
        _agents(session, argument)
    elif name == "/switch" and argument:
        _switch(session, argument)
    elif name == "/switch":
        _list(session)
        print("/switch ID (or a unique prefix of one) continues it")
    else:
        print(f"unknown command {text!r}: /help lists them")
    return None


def _list(session: ChatSession) -> None:
    conversations = session.client.conversations()
    if not conversations:
        print("no conversations yet")
    for line in conversation_lines(conversations, session.conversation_id):
        print(line)


def conversation_lines(conversations: list[dict[str, Any]], current: str | None) -> list[str]:
    """``/list``: one line per conversation, ``*`` marking ``current``, in columns (ids are
    padded to the longest: a client chooses its ids, ``py-1`` beside a 32-digit one)."""
    width = max((len(str(item["id"])) for item in conversations), default=0)
    lines = []
    for item in conversations:
        mark = "*" if item["id"] == current else " "
        title = item.get("title") or "(untitled)"
        updated = str(item.get("updated_at", ""))[:16].replace("T", " ")
        count = f"{item.get('count', 0):>4} msgs"
        lines.append(f"{mark} {item['id']!s:<{width}}  {updated}  {count}  {title}")
    return lines


def _agents(session: ChatSession, wanted: str) -> None:
    agents = session.client.agents()
    names = [str(a["name"]) for a in agents]
    if wanted:
        if wanted not in names:
            print(f"no agent {wanted!r}: /agents lists them")
            return
        session.agent = wanted
        print(f"new conversations talk to {wanted} (/new starts one)")
        return
    defaults = [name for agent, name in zip(agents, names, strict=True) if agent["default"]]
    current = session.agent or (defaults[0] if defaults else "")
    width = max(map(len, names), default=0)
    model_width = max((len(str(agent.get("model", ""))) for agent in agents), default=0)
    for agent, name in zip(agents, names, strict=True):
        mark = "*" if name == current else " "
        about = agent.get("description") or ""
        model = str(agent.get("model", ""))
        print(f"{mark} {name:<{width}}  {model:<{model_width}}  {about}".rstrip())


def _switch(session: ChatSession, wanted: str) -> None:
    from agentik_chat.api import ChatError, Unreachable

    try:
        conversation = find_conversation(session.client, wanted)
    except Unreachable:
        raise
    except ChatError:
        print(f"no single conversation matches {wanted!r}: /list shows them")
        return
    session.conversation_id = str(conversation["id"])
    _remember(session)
    title = conversation.get("title") or "untitled"
    print(
        f"now in conversation {session.conversation_id} ({title}, {conversation['count']} messages)"
    )
    _answer_pending(session)
