"""plughost's compat ``codumentor`` package: the host objects a Codumentor
backend plugin imports (``codumentor.agent.tools.Tool``,
``codumentor.agent.types.ToolResult``,
``codumentor.agent.context_notes.add_context_note``,
``codumentor.plugins.utils``, ``codumentor.plugins.collect_points``).

Served by a finder consulted last, so a real Codumentor on ``sys.path``
always wins.
"""
