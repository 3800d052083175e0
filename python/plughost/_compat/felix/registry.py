"""The ``registry`` a Felix plugin's ``register(registry)`` gets, and the hook kinds it accepts."""

from __future__ import annotations

# --- the registry passed to register(registry) -------------------------------

HOOK_KINDS = (
    "before_turn",
    "filter_history",
    "before_compact",
    "before_model",
    "after_model",
    "before_tool",
    "after_tool",
    "compact_failed",
)


class PluginRegistry:
    """The object Felix passes to ``register(registry)``.

    Registrations are recorded for the host; after ``register`` returned,
    any further registration raises ``RuntimeError`` naming the plugin.
    """

    def __init__(self, key: str = "") -> None:
        self._key = key
        self._closed = False
        self.plugins: list = []
        self.hooks: list = []  # (kind, fn)
        self.startup_hooks: list = []
        self.run_finished: list = []
        self.unused: list = []  # names of accepted, never-used registrations
        self.audit_sink_factory = None
        self.usage_sink_factory = None
        self.authenticators: dict = {}

    def _check(self, what: str) -> None:
        if self._closed:
            raise RuntimeError(
                f"Felix plugin '{self._key}' called registry.{what} after its register(registry) "
                "returned; register everything inside register()"
            )

    def register_plugin(self, plugin) -> None:
        self._check("register_plugin")
        self.plugins.append(plugin)

    def register_startup_hook(self, hook) -> None:
        self._check("register_startup_hook")
        self.startup_hooks.append(hook)

    def register_run_finished(self, hook, origin=None) -> None:
        self._check("register_run_finished")
        self.run_finished.append((hook, origin))
        self.unused.append("register_run_finished")

    def register_audit_sink(self, factory) -> None:
        """Felix's: the last registration wins; ``factory()`` is built once,
        at the first event, and its ``record(event)`` gets every audit row."""
        self._check("register_audit_sink")
        self.audit_sink_factory = factory

    def register_usage_sink(self, factory) -> None:
        """Felix's: ``factory(settings).record(tenant_id=, manifest_id=,
        model_id=, usage=)`` for every model call that reported usage."""
        self._check("register_usage_sink")
        self.usage_sink_factory = factory

    def register_authenticator(self, mode: str, builder) -> None:
        """Felix's: ``builder(settings)`` makes the authenticator of ``mode``
        (``plughost serve --auth MODE``); a later registration of a mode
        replaces it. The built-in modes (none, api_key, jwt) cannot be taken."""
        self._check("register_authenticator")
        if not callable(builder):
            raise TypeError(f"register_authenticator() needs a callable builder, got {type(builder).__name__}")
        from felix.auth.context import BUILTIN_AUTH_MODES

        if mode in BUILTIN_AUTH_MODES:
            raise ValueError(f"auth mode {mode!r} is built in and cannot be registered by a plugin")
        self.authenticators[str(mode)] = builder

    def _unused(self, name):
        def accept(*args, **kwargs) -> None:
            self._check(name)
            self.unused.append(name)

        return accept

    def __getattr__(self, name: str):
        if name.startswith("register_"):
            kind = name[len("register_") :]
            if kind in HOOK_KINDS:

                def add(hook, _kind=kind) -> None:
                    self._check(name)
                    if not callable(hook):
                        raise TypeError(f"{name}() needs a callable, got {type(hook).__name__}")
                    self.hooks.append((_kind, hook))

                return add
            if kind == "model_provider":

                def provide(provider_name, factory, _name=name) -> None:
                    # Felix forwards it to the one model registry.
                    self._check(_name)
                    from felix.patterns.model_registry import register_model_provider

                    register_model_provider(provider_name, factory)

                return provide
            if kind == "decision_provider":
                return self._unused(name)
        raise AttributeError(f"'PluginRegistry' object has no attribute '{name}'")
