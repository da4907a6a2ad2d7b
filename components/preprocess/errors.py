"""The one error type a user of the preprocess stage sees for bad input."""


class InputError(ValueError):
    """Raw input that breaks the contract; the message names file and column."""
