"""``agent.i18n`` compat (plughost): Hermes's message catalogue lookup.
plughost carries no catalogue: a key reads as its English default where
one is known, else as the key itself."""

_DEFAULTS = {
    "platform.irc.quit_message": "Hermes Agent shutting down",
}


def t(key: str, **kwargs) -> str:
    text = _DEFAULTS.get(key, key)
    try:
        return text.format(**kwargs) if kwargs else text
    except (KeyError, IndexError, ValueError):
        return text
