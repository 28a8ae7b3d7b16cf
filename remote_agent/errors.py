"""The agent's error for what the user must fix (printed on one line, exit 2). Its own module so
that the runners raise it without importing the agent, which imports them."""


class AgentError(Exception):
    """Something the user must fix; the agent prints it on one line and exits 2."""
