"""Chat-format prompts for instruct models: a user turn and the start of the assistant's reply."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from ..config import ConfigError

SPLIT = "<<specbench-reply-starts-here>>"  # marks where the reply prefix ends (as evalplus does)
FENCE = re.compile(r"```[\w+-]*\n(.*?)(?:\n```|$)", re.DOTALL)


@dataclass(frozen=True)
class ChatTurn:
    """One chat prompt: the user's message and the first words of the assistant's reply."""

    user: str
    reply_prefix: str = ""


def chat_text(tokenizer: Any, turn: ChatTurn) -> str:
    """The tokenizer's chat template around the turn, ending where the model continues."""
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(
            "task.prompt_format=chat needs a tokenizer with a chat template; this one has none "
            "(use task.prompt_format=raw)"
        )
    messages = [{"role": "user", "content": turn.user}]
    if not turn.reply_prefix:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    messages.append({"role": "assistant", "content": turn.reply_prefix + SPLIT})
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    return text.split(SPLIT)[0]


def extract_code(reply: str, inside_block: bool = False) -> str:
    """The code of a reply. inside_block: the reply prefix opened a fence, so the code is the
    text before the first closing fence; otherwise the first fenced block, else the reply."""
    if inside_block:
        return reply.split("```")[0]
    match = FENCE.search(reply)
    return match.group(1) if match else reply


def sanitize(code: str) -> str:
    """Top-level imports, functions, classes and assignments of the longest prefix that parses
    (evalplus-style): drops demo calls, prints and `if __name__ == ...` blocks."""
    lines = code.splitlines()
    for end in range(len(lines), 0, -1):
        try:
            tree = ast.parse("\n".join(lines[:end]))
        except SyntaxError:
            continue
        keep = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        kept = [n for n in tree.body if isinstance(n, keep + (ast.Assign, ast.AnnAssign))]
        return "\n".join(ast.unparse(n) for n in kept) + "\n"
    return ""
