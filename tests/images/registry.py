#!/usr/bin/env python3
"""A real OCI registry for the image-pull tests: Debian's docker-registry 2.8 over HTTPS with bearer-token auth, its
token server a thread of the test, every key and certificate made by the openssl CLI (nothing beyond the standard
library and /usr/bin/openssl, so any python3 runs it). Also: a tiny oci-archive made from scratch, the push of an
oci-archive over the distribution API, and a blob corrupted on the registry's disk, which the registry then serves
as it is (it checks digests on push, never on read).

    python3 registry.py        self-check: an archive pushed, pulled with a token, refusals, a corrupted blob served

Quirks of docker-registry 2.8 (seen here) worth knowing when pulling from it:
  - An OCI manifest is served only to a client whose Accept names its media type: without, 404 MANIFEST_UNKNOWN
    ("OCI manifest found, but accept header does not support OCI manifests").
  - A token's header needs `x5c` (the signing certificate, chained to the root bundle); `aud` must be one string (a
    list is refused); an expired token is accepted for 60s more; a token granting nothing is answered 401
    UNAUTHORIZED, its challenge then saying error="insufficient_scope".
  - Challenges' scopes list actions in no fixed order ("push,pull" or "pull,push").
  - Blobs are served directly (the filesystem driver never redirects), Range requests answered 206; manifests and
    blobs carry Docker-Content-Digest (the digest asked for, whatever the bytes on disk: see corrupt_blob) and Etag.
  - An upload's Location is an absolute URL.
"""
import base64
import gzip
import hashlib
import http.client
import http.server
import io
import json
import os
import re
import socket
import ssl
import subprocess
import tarfile
import threading
import time
import urllib.parse
import uuid

REGISTRY_BIN = "/usr/bin/docker-registry"
SERVICE = "corral-test-registry"
ISSUER = "corral-test-issuer"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_ACCEPT = ", ".join([OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST])


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def parse_challenge(header):
    """The scheme and parameters of a WWW-Authenticate header: ("Bearer", {"realm": ..., "service": ..., ...})."""
    scheme, _, params = header.partition(" ")
    return scheme, dict(re.findall(r'(\w+)="([^"]*)"', params))


def _openssl(cwd, *args, data=None):
    done = subprocess.run(["openssl", *args], cwd=cwd, input=data, capture_output=True, timeout=60)
    if done.returncode != 0:
        raise AssertionError(f"openssl {' '.join(args)} exited {done.returncode}:\n{done.stderr.decode()[-2000:]}")
    return done.stdout


def _b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _TokenServer(http.server.ThreadingHTTPServer):
    """HTTPS, each connection's handshake in its own thread (a client that never finishes one stalls nobody)."""
    daemon_threads = True

    def __init__(self, registry, context):
        self.registry, self.context = registry, context
        super().__init__(("127.0.0.1", 0), _TokenHandler)

    def finish_request(self, request, client_address):
        try:
            request = self.context.wrap_socket(request, server_side=True)
        except OSError:  # the client refused our certificate, or hung up: nothing to answer
            request.close()
            return
        super().finish_request(request, client_address)


class _TokenHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        status, headers, body = self.server.registry._answer_token(self.path, self.headers.get("Authorization"))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass  # Registry.token_requests records each request


class Registry:
    """docker-registry 2.8 on 127.0.0.1 over HTTPS (a certificate for 127.0.0.1 and localhost, signed by the CA in
    `ca_file`), with bearer tokens from a token server in this process (`token_url`), everything in `work_dir`.

    The token server's policy, read at each request (so a test may change `users` or `anonymous_pull` while it
    runs): with the right HTTP Basic credentials of `users` (name -> password), every action asked for; with wrong
    ones, 401; without any, pull only if `anonymous_pull`, else a token granting nothing (the registry answers it
    401). A `service` other than the registry's is refused (400). Every request is appended to `token_requests` as
    {"user", "service", "scopes", "access", "status"}: clear it after a push to count a pull's. Tokens say
    expires_in `token_ttl` and expire then, but the registry takes them 60s longer.

        with Registry(dir, users={"alice": "secret"}) as registry:
            digest = push_oci_archive(registry, archive, "corral/tiny:v1", "alice", "secret")
    """

    def __init__(self, work_dir, users=None, anonymous_pull=False, token_ttl=300):
        self.dir = work_dir
        self.users = dict(users or {})
        self.anonymous_pull = anonymous_pull
        self.token_ttl = token_ttl
        self.service, self.issuer = SERVICE, ISSUER
        self.token_requests = []
        self.certs_dir = os.path.join(work_dir, "certs")
        self.ca_file = os.path.join(self.certs_dir, "ca.pem")
        self.storage_dir = os.path.join(work_dir, "storage")
        self.config_file = os.path.join(work_dir, "config.yml")
        self.log_file = os.path.join(work_dir, "registry.log")
        self.address = self.url = self.token_url = None
        self._proc = self._log = self._token_server = self._token_thread = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    # Setup and teardown.

    def start(self, timeout=30):
        os.makedirs(self.certs_dir, exist_ok=True)
        os.makedirs(self.storage_dir, exist_ok=True)
        try:
            self._make_certs()
            self._start_token_server()
            self._start_registry(timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self):
        """Ends the registry and the token server; nothing of them is left running (the files are kept)."""
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._token_server is not None:
            self._token_server.shutdown()
            self._token_server.server_close()
            self._token_thread.join()
            self._token_server = self._token_thread = None

    def _make_certs(self):
        """In certs/: ca.pem, a CA; server.pem, 127.0.0.1's and localhost's, signed by it (both EC P-256);
        token.pem, the token server's self-signed RSA certificate, the registry's root bundle (tokens are RS256)."""
        d = self.certs_dir
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        _openssl(d, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "30",
                 "-subj", "/CN=corral test registry CA", "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        with open(os.path.join(d, "server.ext"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\n"
                    "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
                    "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
        _openssl(d, "req", "-new", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
        _openssl(d, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-days", "30",
                 "-set_serial", "0x" + os.urandom(8).hex(), "-extfile", "server.ext", "-out", "server.pem")
        _openssl(d, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "token.key", "-out", "token.pem",
                 "-days", "30", "-subj", "/CN=" + ISSUER)
        self.server_cert, self.server_key = os.path.join(d, "server.pem"), os.path.join(d, "server.key")
        self.token_cert, self.token_key = os.path.join(d, "token.pem"), os.path.join(d, "token.key")
        with open(self.token_cert) as f:
            self._token_x5c = base64.b64encode(ssl.PEM_cert_to_DER_cert(f.read())).decode()

    def _start_token_server(self):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.server_cert, self.server_key)
        self._token_server = _TokenServer(self, context)
        self.token_url = f"https://127.0.0.1:{self._token_server.server_address[1]}/token"
        self._token_thread = threading.Thread(target=self._token_server.serve_forever, name="token-server",
                                              daemon=True)
        self._token_thread.start()

    def _start_registry(self, timeout):
        """Starts docker-registry on a free port (another, up to 3 times, if it was taken meanwhile) and waits
        until /v2/ answers 401."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}  # they would override config
        self._log = open(self.log_file, "ab")
        for _ in range(3):
            port = _free_port()
            self.address, self.url = f"127.0.0.1:{port}", f"https://127.0.0.1:{port}"
            with open(self.config_file, "w") as f:
                json.dump({  # YAML is a superset of JSON
                    "version": 0.1,
                    "log": {"level": "warn"},  # and the access log, one line a request
                    "storage": {"filesystem": {"rootdirectory": self.storage_dir}, "delete": {"enabled": True}},
                    "http": {"addr": self.address, "secret": os.urandom(16).hex(),
                             "tls": {"certificate": self.server_cert, "key": self.server_key}},
                    "auth": {"token": {"realm": self.token_url, "service": self.service, "issuer": self.issuer,
                                       "rootcertbundle": self.token_cert}},
                }, f, indent=2)
            start = self._log.tell()
            self._proc = subprocess.Popen([REGISTRY_BIN, "serve", self.config_file], stdin=subprocess.DEVNULL,
                                          stdout=self._log, stderr=subprocess.STDOUT, env=env)
            deadline = time.time() + timeout
            while self._proc.poll() is None and time.time() < deadline:
                try:
                    status, headers, _ = self.request("GET", "/v2/", timeout=5)
                except OSError:
                    time.sleep(0.05)
                    continue
                if status == 401 and parse_challenge(headers.get("WWW-Authenticate", ""))[0] == "Bearer":
                    return
                break
            if self._proc.poll() is not None:
                with open(self.log_file, "rb") as f:
                    f.seek(start)
                    if b"address already in use" in f.read():
                        continue
            break
        with open(self.log_file, errors="replace") as f:
            raise AssertionError(f"docker-registry did not start on {self.address} ({self._proc.poll()}):\n"
                                 f"{f.read()[-3000:]}")

    # The token server.

    def _answer_token(self, path, authorization):
        """(status, headers, body) for GET `path` with an Authorization header (or None)."""
        url = urllib.parse.urlsplit(path)
        query = urllib.parse.parse_qs(url.query)
        scopes = [s for param in query.get("scope", []) for s in param.split(" ") if s]  # repeated, or spaced
        record = {"user": None, "service": query.get("service", [None])[0], "scopes": scopes, "access": [],
                  "status": None}
        self.token_requests.append(record)

        def answer(status, body, headers=None):
            record["status"] = status
            return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(body).encode()

        if url.path != "/token":
            return answer(404, {"details": "not found"})
        if record["service"] != self.service:
            return answer(400, {"details": f"unknown service {record['service']!r}"})
        user = None
        if authorization is not None:
            scheme, _, credentials = authorization.partition(" ")
            try:
                name, _, password = base64.b64decode(credentials, validate=True).decode().partition(":")
            except ValueError:
                name = password = None
            if scheme.lower() != "basic" or name not in self.users or self.users[name] != password:
                return answer(401, {"details": "wrong credentials"},
                              {"WWW-Authenticate": f'Basic realm="{self.service}"'})
            user = record["user"] = name
        for scope in scopes:
            parts = scope.split(":")
            if len(parts) < 3:
                return answer(400, {"details": f"bad scope {scope!r}"})
            kind, name, actions = parts[0], ":".join(parts[1:-1]), parts[-1].split(",")
            granted = actions if user else [a for a in actions if a == "pull" and self.anonymous_pull]
            if granted:
                record["access"].append({"type": kind, "name": name, "actions": granted})
        token = self._jwt(user or "", record["access"])
        return answer(200, {"token": token, "access_token": token, "expires_in": self.token_ttl,
                            "issued_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})

    def _jwt(self, subject, access):
        """An RS256 JWT docker-registry accepts: the signing certificate in `x5c` (chained to its root bundle)."""
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self._token_x5c]}
        claims = {"iss": self.issuer, "sub": subject, "aud": self.service, "exp": now + self.token_ttl,
                  "nbf": now, "iat": now, "jti": uuid.uuid4().hex, "access": access}
        signing_input = ".".join(_b64url(json.dumps(part).encode()) for part in (header, claims))
        signature = _openssl(self.certs_dir, "dgst", "-sha256", "-sign", "token.key", data=signing_input.encode())
        return signing_input + "." + _b64url(signature)

    # For tests.

    def ssl_context(self):
        """A client context trusting the test CA (and only it)."""
        return ssl.create_default_context(cafile=self.ca_file)

    def token(self, scopes, user=None, password=None):
        """A token from the token server for `scopes` (one "repository:NAME:ACTIONS" or a list of them)."""
        scopes = [scopes] if isinstance(scopes, str) else scopes
        query = urllib.parse.urlencode([("service", self.service)] + [("scope", s) for s in scopes])
        headers = {}
        if user is not None:
            headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        status, _, body = self.request("GET", f"{self.token_url}?{query}", headers=headers)
        if status != 200:
            raise AssertionError(f"token server answered {status}: {body[:500]!r}")
        return json.loads(body)["token"]

    def request(self, method, path, token=None, headers=None, body=None, timeout=60):
        """One HTTPS request to the registry (`path` from /v2/ on) or to an absolute https://127.0.0.1 URL it or the
        token server gave, with a bearer `token`; redirects not followed. `body`: bytes, or a file with its
        Content-Length in `headers`. Returns (status, headers, body)."""
        url = urllib.parse.urlsplit(urllib.parse.urljoin(self.url + "/", path))
        if url.scheme != "https" or url.hostname != "127.0.0.1":
            raise AssertionError(f"not a test server URL: {path}")
        headers = dict(headers or {})
        if token is not None:
            headers["Authorization"] = "Bearer " + token
        conn = http.client.HTTPSConnection(url.netloc, timeout=timeout, context=self.ssl_context())
        try:
            conn.request(method, url.path + ("?" + url.query if url.query else ""), body=body, headers=headers)
            response = conn.getresponse()
            return response.status, response.headers, response.read()
        finally:
            conn.close()

    def blob_path(self, digest):
        """The file that holds blob `digest` (a layer, a config or a manifest) on the registry's disk."""
        algorithm, hex_digest = digest.split(":")
        return os.path.join(self.storage_dir, "docker", "registry", "v2", "blobs", algorithm, hex_digest[:2],
                            hex_digest, "data")

    def corrupt_blob(self, digest, data=None):
        """Changes blob `digest` on the registry's disk: by default the low bit of its last byte flipped (same
        size), else its content replaced by `data` (any size). The registry goes on serving it under `digest`
        (Docker-Content-Digest included), with the new bytes and Content-Length: a client must check digests. A
        manifest's blob too, by tag or digest, if its new bytes still parse as a manifest (else 500 UNKNOWN)."""
        path = self.blob_path(digest)
        if data is None:
            with open(path, "rb") as f:
                data = f.read()
            data = data[:-1] + bytes([data[-1] ^ 1])
        with open(path, "wb") as f:
            f.write(data)
        return path


def make_tiny_oci_archive(path, layers=None, ref="latest", architecture="amd64"):
    """Writes an oci-archive (an OCI image layout as a tar, like `podman save --format oci-archive`) of a tiny
    linux image to `path` and returns its manifest's digest. One gzip layer for each item of `layers`: a dict (file
    name -> bytes, regular files of mode 0644 owned by root) or the bytes of an uncompressed tar made by the caller
    (links, whiteouts, hostile paths...); by default one layer holding hello.txt. Its config lists their diff_ids;
    index.json names the manifest `ref`. The same arguments give the same bytes."""
    layers = layers if layers is not None else [{"hello.txt": b"hello from a corral test image\n"}]
    blobs = {}

    def add(media_type, data):
        digest = sha256(data)
        blobs[digest] = data
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    descriptors, diff_ids = [], []
    for layer in layers:
        if isinstance(layer, dict):
            raw = io.BytesIO()
            with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as t:
                for name, content in layer.items():
                    info = tarfile.TarInfo(name)
                    info.size, info.mode, info.mtime = len(content), 0o644, 0
                    t.addfile(info, io.BytesIO(content))
            layer = raw.getvalue()
        diff_ids.append(sha256(layer))
        descriptors.append(add(OCI_LAYER_GZIP, gzip.compress(layer, mtime=0)))
    config = {"created": "1970-01-01T00:00:00Z", "architecture": architecture, "os": "linux",
              "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                         "Cmd": ["/bin/sh"]},
              "rootfs": {"type": "layers", "diff_ids": diff_ids},
              "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "make_tiny_oci_archive"}] * len(layers)}
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": add(OCI_CONFIG, json.dumps(config).encode()), "layers": descriptors}
    manifest_descriptor = add(OCI_MANIFEST, json.dumps(manifest).encode())
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {**manifest_descriptor, "annotations": {"org.opencontainers.image.ref.name": ref}}]}
    entries = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", json.dumps(index).encode()),
               ("blobs/", None), ("blobs/sha256/", None)]
    entries += [("blobs/sha256/" + digest.split(":")[1], data) for digest, data in sorted(blobs.items())]
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in entries:
            info = tarfile.TarInfo(name.rstrip("/"))
            info.mtime = 0
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            else:
                info.size, info.mode = len(data), 0o644
            t.addfile(info, None if data is None else io.BytesIO(data))
    return manifest_descriptor["digest"]


def push_oci_archive(registry, archive_path, repo_tag, user, password):
    """Pushes the image of an oci-archive (the one manifest of its index.json, with its config and layers; or an
    image index, with its manifests) to `registry` as REPO:TAG ("127.0.0.1:PORT/" before it allowed; no tag means
    latest) with a pull,push token for `user`, over the distribution API: blobs the repository lacks uploaded (POST,
    then PUT with ?digest=), then the manifest by tag. Its bytes are the archive's, unchanged, so the digest it
    returns (the registry's Docker-Content-Digest) is the archive's."""
    name = repo_tag[len(registry.address) + 1:] if repo_tag.startswith(registry.address + "/") else repo_tag
    repo, tag = name.rsplit(":", 1) if ":" in name.rsplit("/", 1)[-1] else (name, "latest")
    token = registry.token(f"repository:{repo}:pull,push", user, password)

    def check(what, status, expected, body):
        if status != expected:
            raise AssertionError(f"{what}: {status} (not {expected}) {body[:1000]!r}")

    with tarfile.open(archive_path) as archive:
        members = {os.path.normpath(m.name): m for m in archive.getmembers() if m.isfile()}

        def blob_member(digest):
            return members[os.path.join("blobs", *digest.split(":"))]

        def push_blob(digest):
            status, _, body = registry.request("HEAD", f"/v2/{repo}/blobs/{digest}", token)
            if status == 200:
                return
            check(f"HEAD blob {digest}", status, 404, body)
            status, headers, body = registry.request("POST", f"/v2/{repo}/blobs/uploads/", token)
            check("POST blobs/uploads/", status, 202, body)
            location = headers["Location"]
            location += ("&" if "?" in location else "?") + urllib.parse.urlencode({"digest": digest})
            member = blob_member(digest)
            status, headers, body = registry.request(
                "PUT", location, token, {"Content-Type": "application/octet-stream",
                                         "Content-Length": str(member.size)}, archive.extractfile(member))
            check(f"PUT blob {digest}", status, 201, body)

        def push_manifest(descriptor, reference):
            data = archive.extractfile(blob_member(descriptor["digest"])).read()
            manifest = json.loads(data)
            media_type = descriptor.get("mediaType") or manifest.get("mediaType") or OCI_MANIFEST
            if media_type in (OCI_INDEX, DOCKER_LIST):
                for child in manifest["manifests"]:
                    push_manifest(child, child["digest"])
            else:
                for blob in [manifest["config"]] + manifest["layers"]:
                    push_blob(blob["digest"])
            status, headers, body = registry.request("PUT", f"/v2/{repo}/manifests/{reference}", token,
                                                     {"Content-Type": media_type}, data)
            check(f"PUT manifest {reference}", status, 201, body)
            if headers.get("Docker-Content-Digest") != sha256(data):
                raise AssertionError(f"registry says {headers.get('Docker-Content-Digest')}, not {sha256(data)}")
            return headers["Docker-Content-Digest"]

        index = json.load(archive.extractfile(members["index.json"]))
        if len(index["manifests"]) != 1:
            raise AssertionError(f"{archive_path}: {len(index['manifests'])} manifests in index.json, not 1")
        return push_manifest(index["manifests"][0], tag)


def _self_check():
    """Pushes a tiny image and pulls it the way a client does, with urllib."""
    import shutil
    import tempfile
    import urllib.error
    import urllib.request

    began = time.time()
    work = tempfile.mkdtemp(prefix="corral-registry-", dir="/var/tmp")
    try:
        archive = os.path.join(work, "tiny.oci.tar")
        digest = make_tiny_oci_archive(archive)
        assert make_tiny_oci_archive(os.path.join(work, "again.tar")) == digest
        with Registry(os.path.join(work, "registry"), users={"alice": "wonderland"}) as registry:
            print(f"PASS registry on {registry.address}, tokens from {registry.token_url}, "
                  f"up in {time.time() - began:.2f}s")
            assert push_oci_archive(registry, archive, f"{registry.address}/corral/tiny:v1",
                                    "alice", "wonderland") == digest
            print(f"PASS pushed as corral/tiny:v1: {digest}")
            registry.token_requests.clear()

            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                                 urllib.request.HTTPSHandler(context=registry.ssl_context()))

            def get(url, headers=None):
                """(status, headers, body); HTTP errors too."""
                try:
                    with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=30) as r:
                        assert r.geturl() == url, f"redirected to {r.geturl()}"
                        return r.status, r.headers, r.read()
                except urllib.error.HTTPError as e:
                    return e.code, e.headers, e.read()

            def token(challenge, user=None, password=None):
                url = challenge["realm"] + "?" + urllib.parse.urlencode(
                    {"service": challenge["service"], "scope": challenge["scope"]})
                headers = {}
                if user is not None:
                    headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
                status, _, body = get(url, headers)
                return status, json.loads(body).get("token")

            manifest_url = f"{registry.url}/v2/corral/tiny/manifests/v1"
            accept = {"Accept": MANIFEST_ACCEPT}
            status, headers, _ = get(manifest_url, accept)
            assert status == 401, status
            scheme, challenge = parse_challenge(headers["WWW-Authenticate"])
            assert scheme == "Bearer" and challenge == {"realm": registry.token_url, "service": SERVICE,
                                                        "scope": "repository:corral/tiny:pull"}, headers
            print(f"PASS unauthenticated manifest GET: 401, {headers['WWW-Authenticate']}")

            status, bearer = token(challenge, "alice", "wonderland")
            assert status == 200
            auth = {"Authorization": "Bearer " + bearer}
            status, headers, body = get(manifest_url, {**accept, **auth})
            assert status == 200, (status, body)
            assert headers["Docker-Content-Digest"] == digest == sha256(body), headers
            assert headers["Content-Type"] == OCI_MANIFEST, headers["Content-Type"]
            print(f"PASS manifest by tag with alice's token: 200, Docker-Content-Digest {digest[:19]}..., "
                  f"Content-Type {headers['Content-Type']}")
            status, headers, body = get(f"{registry.url}/v2/corral/tiny/manifests/{digest}", {**accept, **auth})
            assert status == 200 and sha256(body) == digest and headers["Docker-Content-Digest"] == digest
            print("PASS manifest by digest: 200, same bytes")
            status, _, body = get(manifest_url, auth)
            assert status == 404 and b"MANIFEST_UNKNOWN" in body, (status, body)
            print(f"PASS without an OCI Accept: 404 ({json.loads(body)['errors'][0]['message']})")

            manifest = json.loads(get(manifest_url, {**accept, **auth})[2])
            layer = manifest["layers"][0]["digest"]
            blob_url = f"{registry.url}/v2/corral/tiny/blobs/{layer}"
            for blob in [manifest["config"], manifest["layers"][0]]:
                status, headers, body = get(f"{registry.url}/v2/corral/tiny/blobs/{blob['digest']}", auth)
                assert status == 200 and sha256(body) == blob["digest"] and len(body) == blob["size"]
                assert headers["Docker-Content-Digest"] == blob["digest"]
            config = json.loads(get(f"{registry.url}/v2/corral/tiny/blobs/{manifest['config']['digest']}",
                                    auth)[2])
            assert config["rootfs"]["diff_ids"] == [sha256(gzip.decompress(get(blob_url, auth)[2]))]
            print("PASS config and layer blobs: 200, served directly, digests and diff_id match")

            status, _ = token(challenge, "alice", "wrong")
            assert status == 401
            print("PASS wrong password: 401 from the token server")
            status, anonymous = token(challenge)
            assert status == 200
            status, headers, body = get(manifest_url, {**accept, "Authorization": "Bearer " + anonymous})
            assert status == 401, status
            print(f"PASS anonymous token (no access): 401 {json.loads(body)['errors'][0]['code']}, "
                  f"{headers['WWW-Authenticate']}")
            registry.anonymous_pull = True
            status, anonymous = token(challenge)
            assert get(manifest_url, {**accept, "Authorization": "Bearer " + anonymous})[0] == 200
            push = parse_challenge(registry.request("POST", "/v2/corral/tiny/blobs/uploads/")[1]
                                   ["WWW-Authenticate"])[1]
            assert push["scope"] in ("repository:corral/tiny:pull,push", "repository:corral/tiny:push,pull"), push
            status, anonymous = token(push)
            assert registry.request("POST", "/v2/corral/tiny/blobs/uploads/", anonymous)[0] == 401
            print("PASS anonymous_pull: an anonymous token pulls, does not push")
            assert [(r["user"], r["status"]) for r in registry.token_requests] == [
                ("alice", 200), (None, 401), (None, 200), (None, 200), (None, 200)], registry.token_requests
            print(f"PASS token_requests: {len(registry.token_requests)} recorded")

            registry.corrupt_blob(layer)
            status, headers, body = get(blob_url, auth)
            assert status == 200 and headers["Docker-Content-Digest"] == layer and sha256(body) != layer
            assert len(body) == manifest["layers"][0]["size"]
            print(f"PASS corrupt_blob (a bit flipped): served 200 under {layer[:19]}..., "
                  f"content {sha256(body)[:19]}...")
            registry.corrupt_blob(layer, b"not the layer")
            status, headers, body = get(blob_url, auth)
            assert (status, body, headers["Content-Length"]) == (200, b"not the layer", "13"), (status, body)
            print("PASS corrupt_blob (other bytes, other size): served as they are, Content-Length 13")

            proc = registry._proc
        assert proc.poll() is not None and registry._token_server is None
        print(f"PASS stopped: nothing left running; self-check took {time.time() - began:.2f}s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    _self_check()
