"""The tools disk-cleanup's hooks look at, apart from the code that
snapshots their calls (``calls``), so the plugin can register its hooks
without importing that code: most starts never run a file tool.
"""

from __future__ import annotations

#: Tools whose calls create files, and the parameters that name them.
WRITE_TOOLS = {"write_file": ("path", "file_path", "filename")}
#: Tools that run a command line, the parameter holding it, and the ones
#: naming the directory it runs in.
EXEC_TOOLS = {"exec": ("command", "cmd")}
CWD_PARAMS = ("cwd", "working_dir", "workdir")
#: The tools whose calls are snapshotted; the hooks return at once for the others.
SNAPSHOT_TOOLS = frozenset(WRITE_TOOLS) | frozenset(EXEC_TOOLS)
