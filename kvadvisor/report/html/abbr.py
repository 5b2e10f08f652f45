"""Mark the first use of each glossary term in a rendered page with ``<abbr title=...>``."""

from __future__ import annotations

import re
from html import escape

from kvadvisor.report.glossary import GLOSSARY

# Elements whose text is not prose: charts, data, code, and the glossary that defines the terms.
_SKIP = re.compile(
    r"<(svg|script|style|title|code|abbr)\b.*?</\1>|<dl class=\"glossary\">.*?</dl>|<[^>]*>",
    re.S,
)


def _pattern() -> re.Pattern[str]:
    words = sorted((w for _, spellings, _ in GLOSSARY for w in spellings), key=len, reverse=True)
    # Whole words only; a hyphen after the term (KV-cache) still ends it, a letter does not.
    return re.compile(r"(?<![\w-])(" + "|".join(re.escape(w) for w in words) + r")(?![\w])")


_WORDS = _pattern()
_MEANING = {w: meaning for _, spellings, meaning in GLOSSARY for w in spellings}
_TERM = {w: term for term, spellings, _ in GLOSSARY for w in spellings}


def abbreviate(page: str) -> str:
    """The page with each term's first use in the prose wrapped in ``<abbr>`` (one per term).

    Only text between tags is touched; it is already escaped, and the title is our own text,
    escaped here.
    """
    seen: set[str] = set()
    out: list[str] = []
    body = page.find("<body")
    head, rest = (page[:body], page[body:]) if body >= 0 else ("", page)

    def mark(m: re.Match[str]) -> str:
        word = m.group(1)
        term = _TERM[word]
        if term in seen:
            return word
        seen.add(term)
        return f'<abbr title="{escape(_MEANING[word], quote=True)}">{word}</abbr>'

    pos = 0
    for m in _SKIP.finditer(rest):
        out.append(_WORDS.sub(mark, rest[pos : m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_WORDS.sub(mark, rest[pos:]))
    return head + "".join(out)
