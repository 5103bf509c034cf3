"""The A2A facade (agent card, JSON-RPC at ``POST /``): routes, the card, conversions, task
operations, the 0.3 dialect, the error table for JSON-RPC and the stream.

Imported only by ``web_facade.create_app``; gunicorn's master never loads it. (Inside this
package, ``a2a`` still names the a2a-sdk: imports are absolute.)
"""

import agentik.a2a  # noqa: F401  # first: a2a-sdk's types without starlette (agentik/a2a)
