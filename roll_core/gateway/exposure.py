"""Who can reach the gateway: loopback by default, anything else only with ``agent_gateway.allow_remote``.

The gateway speaks plain HTTP and every request carries the run's API key, so listening beyond this
machine hands the key (and the policy) to whoever sees the traffic. Standard library only: the
config checks a host with it, long before fastapi is imported.
"""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it resolves to whatever the network says
        return False


def remote_host_error(host: str) -> str:
    return (f"agent_gateway.host is {host!r}, which listens beyond this machine: every agent episode's calls, "
            "and the run's API key, would travel in plain HTTP on the network. Keep the default 127.0.0.1, "
            "or set agent_gateway.allow_remote: true if you mean it (a trusted network; docs/authoring.md, "
            "Agents).")
