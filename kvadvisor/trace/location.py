"""Where a trace lives: a local path, or an s3://, gs:// or az:// URI opened as a filesystem.

Credentials come only from the environment and the providers' profiles (the AWS, Google and
Azure SDKs' default chains): a URI that carries a user, a password or a secret in its query is
refused, with the secret left out of the message, so none reaches a report, a log or a shell
history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from kvadvisor.errors import ConfigError, TraceFormatError, TraceNotFoundError
from kvadvisor.io.fileio import URI_SCHEMES, is_uri
from kvadvisor.trace.readers import one_line

# Query keys a URI may carry: where the service is, never who the caller is (pyarrow reads
# these from an s3:// or gs:// URI; every other key it accepts can hold a secret).
SAFE_QUERY_KEYS = frozenset({"region", "endpoint_override", "scheme"})
# The install that brings the filesystems pyarrow lacks (az:// through adlfs and fsspec).
CLOUD_EXTRA = "pip install 'kvadvisor[cloud]'"
CREDENTIAL_SOURCES = (
    "AWS_PROFILE or AWS_ACCESS_KEY_ID, GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_ACCOUNT_NAME "
    "with az login or AZURE_STORAGE_ACCOUNT_KEY"
)


@dataclass(frozen=True)
class Location:
    """A trace's place: ``path`` inside ``filesystem`` (None: the local one), ``uri`` as shown.

    ``prefix`` (``s3://``) turns a path inside the filesystem back into the URI a message shows.
    """

    uri: str
    path: str
    filesystem: Any = None
    prefix: str = ""

    @property
    def remote(self) -> bool:
        """Whether the trace is in an object store (no local file to hash or map)."""
        return self.filesystem is not None

    def shown(self, path: str) -> str:
        """A path inside the filesystem as the user would write it."""
        return self.prefix + path


def redacted(text: str) -> str:
    """A URI with its user, password and query replaced, for a message that must not leak them."""
    parts = urlsplit(text)
    host = parts.netloc.rpartition("@")[2]
    user = "***@" if "@" in parts.netloc else ""
    query = "?***" if parts.query else ""
    return f"{parts.scheme}://{user}{host}{parts.path}{query}"


def check_uri(text: str) -> None:
    """Refuse a URI that names credentials or a scheme no filesystem here reads."""
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in URI_SCHEMES:
        raise ConfigError(
            f"{redacted(text)}: {scheme}:// is not a trace location kvadvisor reads; give "
            "s3://, gs://, az:// or a local path"
        )
    if "@" in parts.netloc:
        raise ConfigError(
            f"{redacted(text)}: credentials in a trace URI are refused (they would reach "
            f"reports and shell history); set them in the environment or a profile "
            f"({CREDENTIAL_SOURCES})"
        )
    keys = sorted({k for k, _ in parse_qsl(parts.query, keep_blank_values=True)} - SAFE_QUERY_KEYS)
    if keys or (parts.query and not parse_qsl(parts.query, keep_blank_values=True)):
        named = ", ".join(keys) or "an unnamed value"
        raise ConfigError(
            f"{redacted(text)}: URI query {named} is refused (a URI may carry only "
            f"{', '.join(sorted(SAFE_QUERY_KEYS))}); give credentials in the environment or a "
            f"profile ({CREDENTIAL_SOURCES})"
        )
    if not parts.netloc:
        raise ConfigError(f"{redacted(text)}: no bucket or container named; give {scheme}://NAME/")


def locate(path: object) -> Location:
    """The filesystem and inner path of a trace given as a local path or a URI."""
    text = str(path)
    if not is_uri(text):
        return Location(uri=text, path=text)
    check_uri(text)
    scheme = URI_SCHEMES[urlsplit(text).scheme.lower()]
    if scheme == "az":
        return _azure(text)
    from pyarrow import fs

    try:
        filesystem, inner = fs.FileSystem.from_uri(text)
    except (OSError, ValueError) as exc:
        raise TraceFormatError(f"{text}: cannot be opened ({one_line(exc)})") from None
    return Location(uri=text, path=inner.rstrip("/"), filesystem=filesystem, prefix=f"{scheme}://")


def _azure(text: str) -> Location:
    """az://CONTAINER/PATH through adlfs (pyarrow's Azure filesystem needs the account inline)."""
    try:
        import adlfs
        from pyarrow import fs
    except ImportError:
        raise ConfigError(f"{text}: reading az:// needs the adlfs package; {CLOUD_EXTRA}") from None
    # adlfs reads the account and its credentials from AZURE_STORAGE_* or the Azure CLI's login.
    handler = fs.FSSpecHandler(adlfs.AzureBlobFileSystem(anon=False))
    inner = text.split("://", 1)[1].rstrip("/")
    return Location(uri=text, path=inner, filesystem=fs.PyFileSystem(handler), prefix="az://")


def check_exists(location: Location) -> bool:
    """Whether the location names a directory-like prefix (True) or one object (False).

    A missing bucket, container, object or prefix is a TraceNotFoundError; a store that cannot
    be reached (no route, refused credentials) a TraceFormatError, each one line.
    """
    from pyarrow import fs

    try:
        info = location.filesystem.get_file_info(location.path)
    except (OSError, ValueError) as exc:
        raise TraceFormatError(f"{location.uri}: cannot be read ({one_line(exc)})") from None
    if info.type == fs.FileType.NotFound:
        raise TraceNotFoundError(
            f"{location.uri}: no such bucket, object or prefix (or the credentials from the "
            "environment may not list it)",
            location.uri,
        )
    return info.type == fs.FileType.Directory
