"""Connecting to a Corral cluster: the cluster bearer token minted from the shared secret file (as every
Corral binary does), TLS channel credentials, and the local `corral up` cluster's addresses (.corral/)."""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import os
import stat
from typing import Optional, Union

import grpc

_CLUSTER_PURPOSE = b"cluster"
_CLUSTER_PAYLOAD = "corral"


def cluster_token(secret_file: str) -> str:
    """The cluster bearer token for `secret_file`: "corral.<base64url HMAC-SHA256(secret, 'cluster\\0corral')>".

    The services' rule: private to its owner (mode 600), or also readable by its group when root owns it
    (a Kubernetes Secret mounted with fsGroup)."""
    st = os.stat(secret_file)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"secret file {secret_file!r} is not a regular file")
    if st.st_mode & (0o037 if st.st_uid == 0 else 0o077):
        raise PermissionError(f"secret file {secret_file!r} has mode {st.st_mode & 0o7777:04o} (owner uid "
                              f"{st.st_uid}); it must not be accessible to others, nor to the group unless root "
                              f"owns it and the group may only read (chmod 600 {secret_file})")
    with open(secret_file, "rb") as f:
        key = f.read().rstrip()
    mac = hmac.new(key, _CLUSTER_PURPOSE + b"\0" + _CLUSTER_PAYLOAD.encode(), hashlib.sha256).digest()
    return _CLUSTER_PAYLOAD + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


@dataclasses.dataclass
class Tls:
    """TLS to the scheduler: a CA bundle to verify it, and a client certificate and key for mutual TLS."""
    ca_file: Optional[str] = None
    cert_file: Optional[str] = None
    key_file: Optional[str] = None

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path):
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()
        return grpc.ssl_channel_credentials(read(self.ca_file), read(self.key_file), read(self.cert_file))


@dataclasses.dataclass
class LocalCluster:
    """What `corral up` wrote to <dir>/cluster.json: each service's addresses and the secret file."""
    dir: str
    secret_file: Optional[str]
    services: dict

    def grpc_address(self, service: str) -> str:
        try:
            return self.services[service]["grpc"]
        except KeyError:
            raise LookupError(f"the local cluster in {self.dir} has no {service}") from None


@dataclasses.dataclass
class Connection:
    """A channel to a Corral service, and what a call on it needs."""
    address: str
    channel: grpc.Channel
    metadata: tuple                                        # the bearer token, for every call
    credentials: Optional[grpc.ChannelCredentials] = None  # TLS (None: plaintext), for more channels alike


def connect(service: str, address: Optional[str], *, secret_file: Optional[str], token: Optional[str],
            tls: Union[None, bool, Tls], cluster_dir: str, options: Optional[list] = None) -> Connection:
    """A channel to a Corral service at `address` (None: the local cluster's `service`, with its secret file),
    encrypted when `tls` is a Tls (or True: the system's CAs), its calls carrying the bearer token (`token`, or one
    minted from `secret_file`)."""
    if address is None:
        cluster = local_cluster(cluster_dir)
        address = cluster.grpc_address(service)
        if secret_file is None and token is None:
            secret_file = cluster.secret_file
    if token is None and secret_file is not None:
        token = cluster_token(secret_file)
    metadata = (("authorization", "Bearer " + token),) if token else ()
    if tls:
        credentials = grpc.ssl_channel_credentials() if tls is True else tls.credentials()
        return Connection(address, grpc.secure_channel(address, credentials, options), metadata, credentials)
    return Connection(address, grpc.insecure_channel(address, options), metadata)


def local_cluster(cluster_dir: str = ".corral") -> LocalCluster:
    """The local `corral up` cluster; FileNotFoundError (saying what to do) when there is none."""
    path = os.path.join(cluster_dir, "cluster.json")
    try:
        with open(path) as f:
            info = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"no local cluster ({path}): start one with `corral up`, or pass the scheduler's "
                                "address") from None
    secret = info.pop("secret_file", None)
    return LocalCluster(dir=cluster_dir, secret_file=secret, services=info)
