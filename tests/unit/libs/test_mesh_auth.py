"""The mesh authenticates its own hops (issue 29): a backend started by `libs.server` with a mesh
token refuses every call but health without it (UNAUTHENTICATED, the request never parsed), and
`libs.channels.open_channel` carries it on every kind of call; with TLS certificates (made here
with `cryptography`) a backend requires a client certificate signed by the mesh CA; a backend with
neither refuses to bind a non-loopback address."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc
from mesh.mcts.v1 import mcts_service_pb2, mcts_service_pb2_grpc

from libs.channels import open_channel
from libs.mesh_auth import TOKEN_METADATA_KEY
from libs.server import Servicer, start_server
from libs.settings import MeshAuth, ServiceSettings

TOKEN = "t" * 12 + "-mesh-token-for-tests"


class _Echo(llm_service_pb2_grpc.LlmServiceServicer):
    def __init__(self) -> None:
        self.calls = 0

    async def Generate(self, request, context):
        self.calls += 1
        return llm_service_pb2.GenerateResponse(text=request.prompt, provider="echo")


class _External(mcts_service_pb2_grpc.MctsServiceServicer):
    """A bidirectional stream that answers each request with an empty response."""

    async def SearchExternal(self, request_iterator, context):
        async for _ in request_iterator:
            yield mcts_service_pb2.SearchExternalResponse()


def _servicers(echo: _Echo) -> list[Servicer]:
    return [Servicer(llm_service_pb2_grpc.add_LlmServiceServicer_to_server, echo,
                     "mesh.llm.v1.LlmService"),
            Servicer(mcts_service_pb2_grpc.add_MctsServiceServicer_to_server, _External(),
                     "mesh.mcts.v1.MctsService")]


@pytest.fixture
async def token_backend():
    echo = _Echo()
    running = await start_server("echo", ServiceSettings(port=0, mesh_token=TOKEN),
                                 _servicers(echo))
    yield running, echo
    await running.stop(0)


async def _health(channel) -> int:
    reply = await health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=""), timeout=5)
    return reply.status


async def test_a_call_without_the_token_is_unauthenticated_and_never_reaches_the_servicer(
        token_backend):
    running, echo = token_backend
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        stub = llm_service_pb2_grpc.LlmServiceStub(channel)
        for metadata in (None, ((TOKEN_METADATA_KEY, "wrong-token-of-some-length"),),
                         ((TOKEN_METADATA_KEY, TOKEN[:-1]),)):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Generate(llm_service_pb2.GenerateRequest(prompt="hi"), timeout=5,
                                    metadata=metadata)
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # Bytes that are no request at all: refused before anything parses them.
        raw = channel.unary_unary("/mesh.llm.v1.LlmService/Generate")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await raw(b"\xff\xff\xff not a protobuf", timeout=5)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # A stream without the token is refused too.
        call = mcts_service_pb2_grpc.MctsServiceStub(channel).SearchExternal(
            iter([mcts_service_pb2.SearchExternalRequest()]), timeout=5)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pass
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # Health stays open for probes.
        assert await _health(channel) == health_pb2.HealthCheckResponse.SERVING
    assert echo.calls == 0


async def test_a_mesh_channel_with_the_token_is_answered_on_every_kind_of_call(token_backend):
    running, echo = token_backend
    channel = open_channel(f"127.0.0.1:{running.port}", auth=MeshAuth(token=TOKEN))
    try:
        reply = await llm_service_pb2_grpc.LlmServiceStub(channel).Generate(
            llm_service_pb2.GenerateRequest(prompt="hi"), timeout=5)
        assert reply.text == "hi"
        call = mcts_service_pb2_grpc.MctsServiceStub(channel).SearchExternal(
            iter([mcts_service_pb2.SearchExternalRequest()] * 2), timeout=5)
        assert len([response async for response in call]) == 2
        assert await _health(channel) == health_pb2.HealthCheckResponse.SERVING
    finally:
        await channel.close()
    assert echo.calls == 1


async def test_a_backend_without_credentials_refuses_a_non_loopback_address():
    with pytest.raises(ValueError, match="MESH_TOKEN"):
        await start_server("echo", ServiceSettings(host="0.0.0.0", port=0), _servicers(_Echo()))


def test_the_settings_want_a_whole_tls_identity_and_a_long_token(tmp_path):
    with pytest.raises(ValueError, match="together"):
        ServiceSettings(mesh_tls_ca_file="ca.pem")
    with pytest.raises(ValueError, match="16 characters"):
        ServiceSettings(mesh_token="short")
    (tmp_path / "token").write_text(f"  {TOKEN}\n")
    assert ServiceSettings(mesh_token_file=str(tmp_path / "token")).mesh_auth().token == TOKEN
    with pytest.raises(ValueError, match="mesh_tls_ca_file: cannot read"):
        ServiceSettings(mesh_tls_ca_file=str(tmp_path / "none"), mesh_tls_cert_file="c",
                        mesh_tls_key_file="k").mesh_auth()


# --- mutual TLS -----------------------------------------------------------------------------


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _ca(name: str):
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(ca_key, ca_cert, name: str):
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return key, cert


def _write_identity(folder: Path, ca_cert, key, cert) -> dict[str, str]:
    folder.mkdir()
    files = {"mesh_tls_ca_file": folder / "ca.pem", "mesh_tls_cert_file": folder / "cert.pem",
             "mesh_tls_key_file": folder / "key.pem"}
    files["mesh_tls_ca_file"].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files["mesh_tls_cert_file"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files["mesh_tls_key_file"].write_bytes(_pem(key))
    return {name: str(path) for name, path in files.items()}


@pytest.fixture
async def tls_backend(tmp_path):
    ca_key, ca_cert = _ca("mesh test CA")
    server = _write_identity(tmp_path / "server", ca_cert, *_leaf(ca_key, ca_cert, "backend"))
    client = _write_identity(tmp_path / "client", ca_cert,
                             *_leaf(ca_key, ca_cert, "orchestrator"))
    other_key, other_ca = _ca("another CA")
    stranger = _write_identity(tmp_path / "stranger", ca_cert,
                               *_leaf(other_key, other_ca, "stranger"))
    echo = _Echo()
    running = await start_server("echo", ServiceSettings(port=0, **server), _servicers(echo))
    yield running, echo, client, stranger
    await running.stop(0)


async def _generate(channel) -> str:
    reply = await llm_service_pb2_grpc.LlmServiceStub(channel).Generate(
        llm_service_pb2.GenerateRequest(prompt="over mTLS"), timeout=5)
    return reply.text


async def test_mutual_tls_answers_a_client_with_a_mesh_certificate(tls_backend):
    running, echo, client, _ = tls_backend
    auth = ServiceSettings(**client).mesh_auth()
    channel = open_channel(f"localhost:{running.port}", auth=auth)
    try:
        assert await _generate(channel) == "over mTLS"
    finally:
        await channel.close()
    assert echo.calls == 1


async def test_mutual_tls_refuses_a_client_without_a_certificate_or_with_a_strangers(tls_backend):
    running, echo, client, stranger = tls_backend
    ca = Path(client["mesh_tls_ca_file"]).read_bytes()
    target = f"localhost:{running.port}"
    # TLS without a client certificate, and a plaintext channel: no call gets through.
    async with grpc.aio.secure_channel(
            target, grpc.ssl_channel_credentials(root_certificates=ca)) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _generate(channel)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    async with grpc.aio.insecure_channel(target) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _generate(channel)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    # A certificate signed by another CA.
    channel = open_channel(target, auth=ServiceSettings(**stranger).mesh_auth())
    try:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _generate(channel)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await channel.close()
    assert echo.calls == 0
