"""``felix.auth``: the authentication types plugin authenticators return (plughost's)."""
