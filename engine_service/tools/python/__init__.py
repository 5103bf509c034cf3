"""``[[tools.python]]``: functions of the operator's own modules as tools (``tool``)."""
