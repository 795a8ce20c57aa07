"""The Kubernetes client against a server that answers whatever a test needs, malformed answers included: every
failure is a KubernetesError (or ResourceExpired for 410) naming what was asked, never another exception."""

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from kubernetes_asyncio import client

from adapter.backends.kube_api import KubernetesMetadataAPI, parse_event
from adapter.backends.kube_client import KubeClient
from adapter.errors import KubernetesError, ResourceExpired
from adapter.naming.resources import PODS

POD = b'{"type":"ADDED","object":{"metadata":{"name":"a","namespace":"ml","resourceVersion":"5"}}}\n'


class Server:
    def __init__(self) -> None:
        self.body = b""
        self.status = 200

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            return web.Response(status=self.status, body=self.body, content_type="application/json")
        resp = web.StreamResponse(status=self.status)
        await resp.prepare(request)
        await resp.write(self.body)
        return resp


@pytest.fixture
async def served(unused_tcp_port: int) -> AsyncIterator[tuple[Server, KubeClient]]:
    server = Server()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{unused_tcp_port}"
    kube = KubeClient(client.ApiClient(configuration), 5.0)
    yield server, kube
    await kube.close()
    await runner.cleanup()


async def events(kube: KubeClient) -> list[dict[str, object]]:
    return [e async for e in kube.watch("/api/v1/pods", [], "WATCH pods", "1", 5)]


async def test_a_well_formed_watch_yields_its_events(served: tuple[Server, KubeClient]) -> None:
    server, kube = served
    server.body = POD + b"\n" + POD
    got = await events(kube)
    assert [parse_event(e).object for e in got] == [parse_event(got[0]).object] * 2


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json\n", "not a JSON object"),
        (b"[1,2,3]\n", "not a JSON object"),
        (b'{"type":"ADDED","object":"pod"}\n', "not a JSON object with an object"),
        (b'{"type":"ERROR","object":{"code":500,"reason":"InternalError"}}\n', "error 500 InternalError"),
        # 8 MiB without a newline: aiohttp refuses the line (LineTooLong) or hands it over whole, not JSON either way
        (b"x" * (8 << 20), "WATCH pods: "),
    ],
)
async def test_a_malformed_watch_is_a_kubernetes_error(
    served: tuple[Server, KubeClient], body: bytes, message: str
) -> None:
    server, kube = served
    server.body = POD + body
    with pytest.raises(KubernetesError, match="WATCH pods") as e:
        await events(kube)
    assert message in str(e.value)
    assert not isinstance(e.value, ResourceExpired)


async def test_410_as_answer_or_event_is_resource_expired(served: tuple[Server, KubeClient]) -> None:
    server, kube = served
    server.body = b'{"type":"ERROR","object":{"code":410,"reason":"Expired"}}\n'
    with pytest.raises(ResourceExpired):
        await events(kube)
    server.status, server.body = 410, b'{"kind":"Status","code":410}'
    with pytest.raises(ResourceExpired):
        await events(kube)


@pytest.mark.parametrize(
    "obj",
    [
        b'{"metadata":{"name":"a","labels":"app=x"}}',
        b'{"metadata":{"name":["a"]}}',
        b'{"metadata":"a"}',
        b'{"metadata":{"name":"a","namespace":7}}',
    ],
)
async def test_objects_of_the_wrong_shape_are_refused(served: tuple[Server, KubeClient], obj: bytes) -> None:
    server, kube = served
    server.body = b'{"type":"MODIFIED","object":' + obj + b"}\n"
    (event,) = await events(kube)
    with pytest.raises(KubernetesError):
        parse_event(event)
    server.body = b'{"metadata":{"resourceVersion":"1"},"items":[' + obj + b"]}"
    with pytest.raises(KubernetesError):
        await KubernetesMetadataAPI(kube).list(PODS)


async def test_a_list_that_is_not_an_object_is_a_kubernetes_error(served: tuple[Server, KubeClient]) -> None:
    server, kube = served
    server.body = b"[]"
    with pytest.raises(KubernetesError, match="not a JSON object"):
        await KubernetesMetadataAPI(kube).list(PODS)
