"""``agent`` compat package (plughost): the provider base classes plugins subclass.

plughost accepts the providers plugins register and does not use them
(``plughost plugins doctor`` lists them as "registered, not used by this host").
"""
