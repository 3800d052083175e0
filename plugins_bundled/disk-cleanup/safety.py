"""Where disk-cleanup may act, what counts as ephemeral, and the words of a
command line that may name files.

The rules: only under the home or a ``/tmp/plughost-*`` directory; never
through a symlink that leads out of them; never the home's ``plugins/``,
``sessions/``, ``skills/`` or ``config.json`` (nor anything inside them), nor
this plugin's own state.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

TMP_PATTERN = "/tmp/plughost-*"
PROTECTED_NAMES = ("plugins", "sessions", "skills", "config.json", "disk-cleanup")
CATEGORIES = ("test", "temp", "cron")
#: Bounds on what one command line costs to inspect.
MAX_COMMAND_WORDS = 64
MAX_WORD = 4096
#: Only this much of a command line is read: ``shlex`` slows down much faster
#: than linearly on long words (1 MB took 44 s), and a hook must stay quick.
MAX_COMMAND_CHARS = 8192
_OPERATOR_CHARS = set("();<>|&")

_patterns: dict = {}


def _pattern(name: str):
    """Regexes compiled on first use (``re`` stays out of plugin start-up)."""
    if not _patterns:
        import re

        _patterns["test"] = re.compile(
            r"^(test[_\-.].*|.*[_\-.]test\.[A-Za-z0-9]+|.*[_\-]tests?\.[A-Za-z0-9]+|scratch[_\-.].*|try[_\-].*\.(py|sh|js|ts|rb))$",
            re.IGNORECASE,
        )
        _patterns["temp"] = re.compile(r"^(tmp.*|.*\.(tmp|temp|bak|swp|swo|part|orig|rej)|.*~)$", re.IGNORECASE)
    return _patterns[name]


def home() -> Path:
    from flowly.profile import get_flowly_home

    return Path(get_flowly_home())


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class Roots:
    """The directories disk-cleanup may act in, resolved once per operation."""

    def __init__(self, home_dir: Path, tmp_roots: list[str]):
        self.home = os.path.realpath(home_dir)
        self.tmp = tmp_roots
        self.all = [self.home, *tmp_roots]
        self.protected = [os.path.join(self.home, n) for n in PROTECTED_NAMES]

    @classmethod
    def current(cls) -> "Roots":
        import glob

        tmp_roots = []
        for candidate in sorted(glob.glob(TMP_PATTERN)):
            try:
                st = os.lstat(candidate)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):  # a symlinked "root" is not a root
                tmp_roots.append(os.path.realpath(candidate))
        return cls(home(), tmp_roots)

    def root_of(self, path: str) -> str | None:
        return next((r for r in self.all if _within(path, r)), None)

    def is_protected(self, path: str) -> bool:
        return any(_within(path, p) for p in self.protected)

    def may_delete(self, path: str) -> bool:
        """True only for a path strictly inside a root, reached without any
        symlink leading out of it, and outside the protected places."""
        path = os.path.normpath(path)
        root = self.root_of(path)
        if root is None or path == root or self.is_protected(path):
            return False
        parent = os.path.realpath(os.path.dirname(path))
        if not _within(parent, root) or self.is_protected(os.path.join(parent, os.path.basename(path))):
            return False
        return True


def absolute(raw: str, base: str | None = None) -> str | None:
    raw = raw.strip().strip("'\"")
    if not raw:
        return None
    raw = os.path.expanduser(raw)
    if not os.path.isabs(raw):
        if not base or not os.path.isabs(os.path.expanduser(base)):
            return None
        raw = os.path.join(os.path.expanduser(base), raw)
    return os.path.normpath(raw)


def is_regular_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def categorize(path: str, roots: Roots) -> str | None:
    """``test``, ``temp`` or ``cron`` for files that look ephemeral, else None."""
    name = os.path.basename(path)
    if _within(path, os.path.join(roots.home, "cron")):
        return "cron"
    if _pattern("test").match(name):
        return "test"
    if _pattern("temp").match(name) or any(_within(path, t) for t in roots.tmp):
        return "temp"
    return None


def paths_in_command(command: str) -> list[str]:
    """The words of a shell command line that may name a file: every word but
    operators (``&&``, ``|``, ``>``…) and options, plus the value of an
    ``--option=value`` or ``NAME=value`` word. At most ``MAX_COMMAND_WORDS``,
    from the first ``MAX_COMMAND_CHARS`` characters (the word cut there is
    dropped).
    Nothing is expanded: ``$VAR``, globs and ``$(…)`` stay literal, so they
    match only a file of that literal name. Callers check each word against
    the disk before and after the call; a word alone proves nothing."""
    import shlex

    cut = len(command) > MAX_COMMAND_CHARS
    command = command[:MAX_COMMAND_CHARS]
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: plain words
        tokens = command.split()
    if cut and tokens:
        tokens.pop()
    found: list[str] = []
    for token in tokens:
        if "=" in token and not token.startswith(("/", "./", "../", "~")):
            token = token.split("=", 1)[1]
        if not token or token.startswith("-") or set(token) <= _OPERATOR_CHARS:
            continue
        if len(token) > MAX_WORD or "\0" in token or token in found:
            continue
        found.append(token)
        if len(found) >= MAX_COMMAND_WORDS:
            break
    return found
