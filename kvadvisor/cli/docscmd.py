"""`kvadvisor docs [TOPIC[#SECTION]]`: the reference docs, shipped inside the package.

Error messages end with ``(see `kvadvisor docs errors#SLUG`)`` and reports cite topics the same
way, so every reference resolves for a pip-installed user, who has no docs/ folder: a wheel
carries the repository's docs/ as ``kvadvisor/_docs`` (pyproject.toml), a checkout reads docs/.
"""

from __future__ import annotations

import importlib.resources
import re
import shutil
from pathlib import Path
from typing import Annotated

import typer

from kvadvisor.cli.common import app, echo, echo_styled, handle_user_errors, wants_color
from kvadvisor.errors import ConfigError

_ANCHOR = re.compile(r'^<a id="([^"]+)"></a>\s*$')
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")


def docs_dir() -> Path:
    """The shipped docs: inside the installed package, else ``<repo>/docs`` in a checkout."""
    packaged = importlib.resources.files("kvadvisor") / "_docs"
    if packaged.is_dir():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parents[2] / "docs"
    if checkout.is_dir():
        return checkout
    raise ConfigError("the docs are missing from this installation; reinstall kvadvisor")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def topics() -> dict[str, str]:
    """Topic name -> its title (the first heading of each docs/*.md)."""
    out = {}
    for path in sorted(docs_dir().glob("*.md")):
        headings = (_HEADING.match(line) for line in path.read_text("utf-8").splitlines())
        first = next((h for h in headings if h), None)
        out[path.stem] = first.group(2) if first else path.stem
    return out


def section(text: str, name: str) -> str | None:
    """The part of ``text`` under anchor or heading ``name``, up to the next one of its level.

    An anchor (``<a id="name"></a>``) names the heading after it; otherwise a heading whose
    GitHub slug is ``name``. None when neither is there.
    """
    lines = text.splitlines()
    start, level = None, 7
    for i, line in enumerate(lines):
        anchor, heading = _ANCHOR.match(line), _HEADING.match(line)
        if anchor and anchor.group(1) == name:
            start = next((j for j in range(i + 1, len(lines)) if lines[j].strip()), len(lines))
            after = _HEADING.match(lines[start]) if start < len(lines) else None
            level = len(after.group(1)) if after else 7
            break
        if heading and slug(heading.group(2)) == name:
            start, level = i, len(heading.group(1))
            break
    if start is None:
        return None

    def ends(line: str) -> bool:
        heading = _HEADING.match(line)
        return bool(_ANCHOR.match(line) or (heading and len(heading.group(1)) <= level))

    end = next((j for j in range(start + 1, len(lines)) if ends(lines[j])), len(lines))
    return "\n".join(lines[start:end]).strip() + "\n"


@app.command("docs")
def docs_cmd(
    topic: Annotated[
        str | None,
        typer.Argument(
            metavar="[TOPIC[#SECTION]]",
            help="A topic (errors, reports, cache, ...) or one section of it: errors#config.",
            show_default=False,
        ),
    ] = None,
    raw: Annotated[
        bool,
        typer.Option("--raw", help="The Markdown source as it is (anchors included)."),
    ] = False,
) -> None:
    """Print the reference docs: the topics, one topic, or one section of it."""
    with handle_user_errors():
        known = topics()
        if topic is None:
            width = max(map(len, known))
            echo("".join(f"{name:<{width}}  {title}\n" for name, title in known.items()))
            return
        name, _, part = topic.partition("#")
        if name not in known:
            raise ConfigError(f"no docs topic {name!r}; the topics are: {', '.join(known)}")
        text = (docs_dir() / f"{name}.md").read_text(encoding="utf-8")
        if part:
            found = section(text, part)
            if found is None:
                raise ConfigError(f"{name}: no section {part!r}; see `kvadvisor docs {name}`")
            text = found
        if raw:
            echo(text, nl=False)
            return
        from kvadvisor.report.docsterm import render_docs

        color = wants_color()
        drawn = render_docs(text, shutil.get_terminal_size().columns, color=color)
        # Drawn text is already safe (render_docs escapes controls): its styles stay.
        echo_styled(drawn) if color else echo(drawn, nl=False)
