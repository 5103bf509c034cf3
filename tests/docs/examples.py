"""The fenced examples of README.md and docs/*.md, and shell blocks cut into commands."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNABLE = frozenset({"sh", "bash", "python", "toml", "ts", "js", "go", "java"})
_FENCE = re.compile(r"(?ms)^```(\w+)\n(.*?)^```")


@dataclass(frozen=True)
class Block:
    """One fenced example: where it is, its language and its text."""

    path: str
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def doc_paths() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks() -> list[Block]:
    """Every fenced block in a language that runs, in reading order."""
    found: list[Block] = []
    for path in doc_paths():
        text = path.read_text()
        for match in _FENCE.finditer(text):
            if match.group(1) in RUNNABLE:
                line = text.count("\n", 0, match.start()) + 1
                rel = str(path.relative_to(ROOT))
                found.append(Block(rel, line, match.group(1), match.group(2)))
    return found


def commands(script: str) -> list[str]:
    """Cut a shell block into its commands: a command goes on over a trailing backslash and
    over newlines inside quotes; comment lines and blank lines are dropped."""
    out: list[str] = []
    current = ""
    single = double = False
    for line in script.splitlines(keepends=True):
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line
        escaped = False
        for index, char in enumerate(line):
            if escaped:
                escaped = False
            elif char == "\\" and not single:
                escaped = True
            elif char == "'" and not double:
                single = not single
            elif char == '"' and not single:
                double = not double
            elif char == "#" and not single and not double and line[index - 1 : index] in " ":
                break  # a comment: its quotes are prose
        if single or double or line.rstrip("\n").endswith("\\"):
            continue
        out.append(_strip_comment(current).strip())
        current = ""
    assert not current, f"unterminated command: {current!r}"
    return out


def _strip_comment(command: str) -> str:
    """Drop a trailing ``# comment`` on the command's last line (outside quotes)."""
    head, _, last = command.rstrip("\n").rpartition("\n")
    single = double = False
    for index, char in enumerate(last):
        if char == "'" and not double:
            single = not single
        elif char == '"' and not single:
            double = not double
        elif char == "#" and not single and not double and (index == 0 or last[index - 1] == " "):
            last = last[:index]
            break
    return f"{head}\n{last}" if head else last
