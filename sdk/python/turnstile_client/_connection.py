"""The client's address, token and CA: explicit arguments first, then the environment
(`TURNSTILE_SERVER`, `TURNSTILE_TOKEN`, `TURNSTILE_CA_CERT`, as the command line reads
them), and the channel built from them."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

import grpc
import grpc.aio

DEFAULT_SERVER = "http://127.0.0.1:50051"

# Fencing tokens and payloads up to the server's 4 MiB messages both ways.
_OPTIONS: Sequence[Tuple[str, Union[str, int]]] = (
    ("grpc.max_receive_message_length", 8 * 1024 * 1024),
    ("grpc.max_send_message_length", 8 * 1024 * 1024),
)


@dataclass(frozen=True)
class Settings:
    target: str
    tls: bool
    token: Optional[str]
    ca_cert: Optional[bytes]

    @classmethod
    def resolve(
        cls, server: Optional[str], token: Optional[str], ca_cert: Optional[str]
    ) -> "Settings":
        server = server or os.environ.get("TURNSTILE_SERVER") or DEFAULT_SERVER
        token = token if token is not None else os.environ.get("TURNSTILE_TOKEN") or None
        ca_path = ca_cert if ca_cert is not None else os.environ.get("TURNSTILE_CA_CERT") or None
        target, tls = parse_server(server)
        ca = None
        if ca_path:
            with open(ca_path, "rb") as file:
                ca = file.read()
        return cls(target=target, tls=tls, token=token, ca_cert=ca)

    @property
    def metadata(self) -> Tuple[Tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def channel(self) -> grpc.aio.Channel:
        options = list(_OPTIONS)
        if self.target.startswith(("ipv4:", "ipv6:")):
            # The default :authority of a list target is the whole list, which HTTP/2
            # servers refuse (RST_STREAM PROTOCOL_ERROR): name the first replica.
            first = self.target.split(":", 1)[1].split(",")[0]
            options.append(("grpc.default_authority", first))
        if self.tls:
            creds = grpc.ssl_channel_credentials(root_certificates=self.ca_cert)
            return grpc.aio.secure_channel(self.target, creds, options=options)
        return grpc.aio.insecure_channel(self.target, options=options)


def parse_server(server: str) -> Tuple[str, bool]:
    """`http://host:port` or `https://host:port` into a gRPC target and whether it is
    TLS. Several replicas may be named at once (`http://10.0.0.1:50051,10.0.0.2:50051`,
    IP addresses only): the channel moves to another when one stops answering."""
    scheme, sep, rest = server.partition("://")
    if not sep:
        scheme, rest = "http", server
    if scheme not in ("http", "https"):
        raise ValueError(f'server: "{server}" must start with http:// or https://')
    rest = rest.rstrip("/")
    hosts = [h.strip() for h in rest.split(",") if h.strip()]
    if not hosts:
        raise ValueError(f'server: "{server}" names no host')
    if len(hosts) == 1:
        return hosts[0], scheme == "https"
    for host in hosts:
        name = host.rsplit(":", 1)[0].strip("[]")
        try:
            ipaddress.ip_address(name)
        except ValueError:
            raise ValueError(f'server: "{host}": a list of replicas takes IP addresses') from None
    family = "ipv6" if ":" in hosts[0].rsplit(":", 1)[0] else "ipv4"
    return f"{family}:{','.join(hosts)}", scheme == "https"
