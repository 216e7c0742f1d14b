"""Which network addresses a webhook may reach (SSRF protection; decisions.md, Webhook
deliveries). Pure: no I/O.

In production mode a webhook URL must resolve only to public addresses: loopback, link-local,
private, unique-local, multicast, reserved and unspecified addresses (and IPv4 mapped into IPv6)
are refused, unless the operator sets `WEBHOOK_ALLOW_PRIVATE=true`.
"""

from __future__ import annotations

import ipaddress


def is_public_address(address: str) -> bool:
    """Whether `address` (an IPv4 or IPv6 literal, maybe with a `%zone`) is a public unicast
    address. False for anything that does not parse."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_reserved
                or ip.is_unspecified or not ip.is_global)
