"""Property fuzz of the files other people give and the files kvadvisor writes (issue 31, 9).

* Engine files: any bytes, as an LMCache YAML, a KVBM env file, a Mooncake JSON or a launch
  script named by a plan, either load or fail with one ``PlanError`` line naming the key path:
  never another exception, and never the file's text beyond the key.
* Generated artefacts: any text, as a name written into a generated shell script, stays one
  bash word that means exactly that text (bash prints it back byte for byte), and as a comment
  stays one line (a newline cannot end a comment and start a command, nor a fio section).
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvadvisor.errors import PlanError
from kvadvisor.plan import load_plan
from kvadvisor.quoting import comment, shell_word

SUFFIXES = (".yaml", ".env", ".json", ".sh")
# A line of a secret file whose secret part must never come back in a message (a message may
# name the offending key, here "root", and nothing more of the line).
SECRET = b"root:*:20228:0:99999:7:::s3cr3t"
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Bytes that look like each format half the time: the parsers' edges, not only noise.
LOOKALIKE = st.one_of(
    st.binary(max_size=400),
    st.lists(
        st.sampled_from(
            [
                b"chunk_size: 256\n",
                b"max_local_cpu_size: 1e999\n",
                b"a: 1\na: 2\n",
                b"!!python/object:os.system\n",
                b"[[[[[[[[[[",
                b'{"mooncake": {"client": {"a": 1, "a": 2}}}',
                b"export DYN_KVBM_CPU_CACHE_GB=' \n",
                b"DYN_KVBM_CPU_CACHE_GB=NaN\n",
                b"ARGS=(--kv-cache-dtype fp8\n",
                b"\xff\xfe\x00",
                SECRET + b"\n",
                b"\n",
            ]
        ),
        max_size=12,
    ).map(b"".join),
)


@FUZZ
@given(LOOKALIKE, st.sampled_from(SUFFIXES))
def test_engine_files_load_or_fail_with_one_plan_error(data: bytes, suffix: str) -> None:
    """Any content, any of the four kinds: loaded, or one PlanError line, its text not echoed."""
    with tempfile.TemporaryDirectory() as folder:
        plan = Path(folder) / "plan.yaml"
        (Path(folder) / f"engine{suffix}").write_bytes(data)
        plan.write_text(
            "model: {kv_bytes_per_token: 1000}\n"
            f"stages:\n  prefill:\n    engine_files: ['engine{suffix}']\n"
        )
        try:
            load_plan(plan)
        except PlanError as exc:
            message = str(exc)
            assert "\n" not in message
            assert "stages.prefill." in message, message
            assert "s3cr3t" not in message, message


def _bash(script: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script], capture_output=True, timeout=20
    )


# Every character but NUL (no bash word can hold one, nor can a path or an argument) and lone
# surrogates (no UTF-8 text holds one; a trace file name that is not UTF-8 is refused before
# anything is written: "the file name is not UTF-8 text").
NAMES = st.text(
    alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
    max_size=40,
)


@FUZZ
@given(NAMES)
def test_a_name_is_one_shell_word_meaning_exactly_itself(name: str) -> None:
    """``printf %s WORD`` in bash prints the name's bytes; the word holds no line break."""
    word = shell_word(name)
    assert "\n" not in word and "\r" not in word
    done = _bash(f"printf %s {word}")
    assert done.returncode == 0, done.stderr
    assert done.stdout == name.encode("utf-8", "surrogateescape")


@FUZZ
@given(NAMES, st.sampled_from(["#", ";"]))
def test_a_name_in_a_comment_never_leaves_it(name: str, prefix: str) -> None:
    """A comment of any name is one line: bash runs nothing of it; fio sees no new section."""
    line = comment(name, prefix)
    assert line.startswith(prefix) and len(line.splitlines()) <= 1
    if prefix == "#":
        done = _bash(f"{line}\nprintf done")
        assert done.returncode == 0 and done.stdout == b"done", done.stderr
