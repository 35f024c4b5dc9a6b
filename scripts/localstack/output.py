"""What the local stack prints: lines for the user on stdout, and key=value diagnostics on
stderr (by verbosity) and in its log file (everything)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from pathlib import Path

_STANDARD_ATTRS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def say(line: str = "") -> None:
    """A line for the user, on stdout."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class LogfmtFormatter(logging.Formatter):
    """`time=… level=… logger=… msg="…"` plus every field passed with `extra=`."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        pairs: list[tuple[str, object]] = [
            ("time", stamp),
            ("level", record.levelname),
            ("logger", record.name),
            ("msg", record.getMessage()),
        ]
        pairs += [
            (key, value)
            for key, value in vars(record).items()
            if key not in _STANDARD_ATTRS and not key.startswith("_")
        ]
        text = " ".join(f"{key}={_logfmt_value(value)}" for key, value in pairs)
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def _logfmt_value(value: object) -> str:
    text = str(value)
    if text and not any(c in text for c in ' "=\n'):
        return text
    return json.dumps(text)


def configure_logging(verbosity: int) -> None:
    """Warnings on stderr (-v: info, -vv: debug)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    levels = {0: logging.WARNING, 1: logging.INFO}
    handler.setLevel(levels.get(verbosity, logging.DEBUG))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(logging.DEBUG)
    # The client libraries are chatty at DEBUG (httpcore: eight lines a relayed push, a tenth of
    # this process's Python CPU in a sale); their warnings still show.
    for noisy in ("google", "urllib3", "grpc", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.INFO)


def log_to_file(path: Path) -> None:
    """Everything, also into `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(LogfmtFormatter())
    handler.setLevel(logging.DEBUG)
    logging.getLogger().addHandler(handler)
